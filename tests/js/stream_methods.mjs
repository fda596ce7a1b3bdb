// Streams one run of a noterag graph from a `langgraph dev` server with the JS SDK and prints
// every event it receives as one JSON line, in arrival order, for tests/test_js_client.py to
// assert on: {"event": <SSE event name>, "data": <payload>}.
//
//   node stream_methods.mjs <url> <graph id> <input JSON> <context JSON>
import { Client } from "@langchain/langgraph-sdk";

const [url, graphId, input, context] = process.argv.slice(2);
if (!url || !graphId || !input || !context) {
  console.error("usage: node stream_methods.mjs <url> <graph id> <input JSON> <context JSON>");
  process.exit(2);
}

// apiKey null: never send a LangSmith key from the environment to the local server.
// maxRetries 0: a retried POST would start a second run.
const client = new Client({ apiUrl: url, apiKey: null, callerOptions: { maxRetries: 0 } });

const stream = client.runs.stream(null, graphId, {
  input: JSON.parse(input),
  context: JSON.parse(context),
  streamMode: ["custom", "messages-tuple", "values"],
});
for await (const { event, data } of stream) {
  process.stdout.write(JSON.stringify({ event, data }) + "\n");
}
