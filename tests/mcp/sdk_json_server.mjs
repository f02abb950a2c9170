// The baseline scripts/bench-mcp measures opgate's MCP front door against:
// a Streamable HTTP server built the way the official TypeScript SDK's
// JSON-response example builds one (McpServer, StreamableHTTPServerTransport
// with enableJsonResponse, one transport per session, the SDK's Express app
// with its Host checks), answering a trivial tool, `greet`. Unlike the
// example it logs nothing per request and listens on a free port, which it
// prints as {"port": N}. Usage: node sdk_json_server.mjs
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod/v4';

function serverForOneSession() {
  const server = new McpServer({ name: 'sdk-json-baseline', version: '1.0.0' });
  server.registerTool(
    'greet',
    { description: 'Greets someone by name', inputSchema: { name: z.string() } },
    async ({ name }) => ({ content: [{ type: 'text', text: `Hello, ${name}!` }] }),
  );
  return server;
}

const transports = new Map();
const app = createMcpExpressApp();

app.post('/mcp', async (req, res) => {
  const id = req.headers['mcp-session-id'];
  const known = id ? transports.get(id) : undefined;
  if (known) return known.handleRequest(req, res, req.body);
  if (id) {
    return res.status(404).json({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });
  }
  if (!isInitializeRequest(req.body)) {
    return res.status(400).json({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'No session' } });
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableJsonResponse: true,
    onsessioninitialized: (sessionId) => transports.set(sessionId, transport),
  });
  transport.onclose = () => transports.delete(transport.sessionId);
  await serverForOneSession().connect(transport);
  return transport.handleRequest(req, res, req.body);
});

const listener = app.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ port: listener.address().port }));
});
process.on('SIGTERM', () => process.exit(0));
