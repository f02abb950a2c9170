// The official MCP TypeScript SDK's client against opgate's MCP front door,
// one step of the flow per run (the C++ integration test drives it, approves
// operations in between, and restarts the daemon):
//
//   node sdk_flow.mjs plain URL        list the tools, call request_refund plainly
//   node sdk_flow.mjs task-start URL   call request_refund as a task; print its id
//   node sdk_flow.mjs task-finish URL TASK_ID
//                                      (a new session) wait for the task to end and
//                                      print its result
//
// Prints one JSON object on stdout; exits non-zero on any failure.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';

const [step, url, taskId] = process.argv.slice(2);

async function connect() {
  const client = new Client({ name: 'opgate-sdk-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  return client;
}

function fail(message) {
  console.error(message);
  process.exit(1);
}

const client = await connect();
try {
  if (step === 'plain') {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    const refund = tools.find((t) => t.name === 'request_refund');
    if (!refund) fail('request_refund is not listed');
    const result = await client.callTool({ name: 'request_refund', arguments: { order_id: 'ORDER-100' } });
    console.log(JSON.stringify({
      tools: names,
      task_support: refund.execution?.taskSupport ?? null,
      protocol: client.getServerVersion()?.name ?? null,
      result,
    }));
  } else if (step === 'task-start') {
    const created = await client.request(
      { method: 'tools/call', params: { name: 'request_refund', arguments: { order_id: 'ORDER-300' } } },
      CreateTaskResultSchema,
      { task: { ttl: 600000 } });
    console.log(JSON.stringify({ task: created.task }));
  } else if (step === 'task-finish') {
    const deadline = Date.now() + 60000;
    let task = await client.experimental.tasks.getTask(taskId);
    const seen = [task.status];
    while (!['completed', 'failed', 'cancelled'].includes(task.status)) {
      if (Date.now() > deadline) fail(`the task is still ${task.status}`);
      await new Promise((r) => setTimeout(r, 100));
      task = await client.experimental.tasks.getTask(taskId);
      if (seen[seen.length - 1] !== task.status) seen.push(task.status);
    }
    const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
    const { tasks } = await client.experimental.tasks.listTasks();
    console.log(JSON.stringify({ statuses: seen, result, listed: tasks.map((t) => t.taskId) }));
  } else {
    fail(`unknown step ${step}`);
  }
} finally {
  await client.close();
}
