// A refund agent built with the OpenAI Agents SDK for JavaScript that reaches
// opgate over MCP. The model is scripted (no network, no API key): it asks for
// a refund of the order, then follows the operation with get_operation until a
// person has decided and the payment provider has answered, and reports the
// verified result. Swap ScriptedModel for a real model to run it for real.
//
//   OPGATE_MCP_URL=http://127.0.0.1:8082/mcp/ogat_... node agent.mjs ORDER-100
//
// The URL is the capability URL `opgate agent-tokens create` prints: the token
// in it binds the agent to one customer, so no tool takes an owner.
import { Agent, MCPServerStreamableHttp, Usage, run, setTracingDisabled } from '@openai/agents';

setTracingDisabled(true);

const url = process.env.OPGATE_MCP_URL;
const orderId = process.argv[2] ?? 'ORDER-100';
const pollMs = Number(process.env.OPGATE_POLL_MS ?? 1000);
if (!url) {
  console.error('set OPGATE_MCP_URL to the MCP URL of an agent token');
  process.exit(2);
}

// The last tool result the agent received, parsed.
function lastResult(input) {
  const items = Array.isArray(input) ? input : [];
  const found = [...items].reverse().find((i) => i.type === 'function_call_result');
  if (!found) return null;
  const out = found.output;
  const text = typeof out === 'string' ? out
    : Array.isArray(out) ? out.map((p) => p.text ?? '').join('')
    : out?.text ?? JSON.stringify(out);
  try { return JSON.parse(text); } catch { return { text }; }
}

function call(name, args) {
  return { usage: new Usage(), output: [{ type: 'function_call', callId: `call_${Date.now()}`,
    name, arguments: JSON.stringify(args), status: 'completed' }] };
}

function say(text) {
  return { usage: new Usage(), output: [{ type: 'message', role: 'assistant', status: 'completed',
    content: [{ type: 'output_text', text }] }] };
}

// What a model would do with these tools: propose, then wait for the verified
// outcome without ever claiming success on its own.
class ScriptedModel {
  async getResponse(request) {
    const result = lastResult(request.input);
    if (!result) return call('request_refund', { order_id: orderId, reason: 'The customer asked.' });
    const key = result.operation_key;
    if (result.status === 'pending_approval' || (result.state && result.state !== 'settled')) {
      if (result.state) await new Promise((r) => setTimeout(r, pollMs));
      console.error(`waiting: ${key} is ${result.state ?? 'pending approval'}`);
      return call('get_operation', { operation_key: key });
    }
    if (result.state === 'settled') {
      const verified = result.result;
      return say(JSON.stringify({ verified }));
    }
    return say(JSON.stringify({ refused: result.text ?? result }));
  }

  async *getStreamedResponse(request) {
    const response = await this.getResponse(request);
    yield { type: 'response_done', response: { id: 'scripted', usage: { inputTokens: 0,
      outputTokens: 0, totalTokens: 0 }, output: response.output } };
  }
}

const opgate = new MCPServerStreamableHttp({ url, name: 'opgate' });
await opgate.connect();
try {
  const agent = new Agent({
    name: 'refund agent',
    instructions: 'Help the customer. Refunds need a person to approve them; report only the ' +
      'verified outcome.',
    model: new ScriptedModel(),
    mcpServers: [opgate],
  });
  const result = await run(agent, `Please refund ${orderId}.`, { maxTurns: 600 });
  console.log(result.finalOutput);
} finally {
  await opgate.close();
}
