// Producer: the Vercel AI SDK (`ai`) on Node, with its own OpenTelemetry spans
// (`experimental_telemetry: { isEnabled: true }`), exported by the stock OpenTelemetry JS
// OTLP/HTTP exporter through `@opentelemetry/sdk-node`.
//
// The model is the AI SDK's own mock (`MockLanguageModelV3` from `ai/test`): each turn it
// answers with the session's next tool call (counting the tool results already in the
// prompt), then with the final text. The tools are AI SDK `tool()`s that read real files of
// a scratch workspace (notes/0.txt .. notes/9.txt; missing.txt is absent, so Node raises
// ENOENT) or answer a build status. `generateText` runs the tool loop.
//
// Usage: node producer.mjs --endpoint URL --key KEY --session failing|healthy|noop
//        [--variant proto|json]   (proto: exporter-trace-otlp-proto, the default;
//                                  json: exporter-trace-otlp-http)

import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { OTLPTraceExporter as JsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as ProtoExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { NodeSDK } from "@opentelemetry/sdk-node";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

const SESSIONS = {
  failing: {
    calls: Array.from({ length: 7 }, () => ["read_file", { path: "missing.txt" }]),
    answer: "I could not read missing.txt: it does not exist.",
  },
  healthy: {
    calls: Array.from({ length: 10 }, (_, i) => ["read_file", { path: `notes/${i}.txt` }]),
    answer: "I read all ten notes.",
  },
  noop: {
    calls: Array.from({ length: 7 }, () => ["check_status", { job: "build" }]),
    answer: "The build is still pending.",
  },
};

const { values: args } = parseArgs({
  options: {
    endpoint: { type: "string" },
    key: { type: "string" },
    session: { type: "string" },
    variant: { type: "string", default: "proto" },
  },
});
const session = SESSIONS[args.session];
if (!args.endpoint || !args.key || !session || !["proto", "json"].includes(args.variant)) {
  console.error(
    "usage: producer.mjs --endpoint URL --key KEY --session failing|healthy|noop [--variant proto|json]",
  );
  process.exit(2);
}
const sessionId = `conformance-${args.session}-${randomUUID().slice(0, 12)}`;

/** A scratch workspace holding notes/0.txt .. notes/9.txt, each with its own contents. */
function makeWorkspace() {
  const root = mkdtempSync(join(tmpdir(), "loopboard-conformance-"));
  mkdirSync(join(root, "notes"));
  for (let i = 0; i < 10; i++) {
    writeFileSync(join(root, "notes", `${i}.txt`), `contents of notes/${i}.txt`);
  }
  return root;
}

/** The mock model's answer to one prompt: the next scripted call, else the final text. */
function nextTurn(prompt) {
  const done = prompt
    .filter((message) => message.role === "tool")
    .flatMap((message) => message.content)
    .filter((part) => part.type === "tool-result").length;
  const usage = {
    inputTokens: { total: 20, noCache: 20, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: 10, text: 10, reasoning: undefined },
  };
  if (done >= session.calls.length) {
    return {
      content: [{ type: "text", text: session.answer }],
      finishReason: { unified: "stop", raw: "stop" },
      usage,
      warnings: [],
    };
  }
  const [toolName, input] = session.calls[done];
  return {
    content: [
      { type: "tool-call", toolCallId: `call_${done}`, toolName, input: JSON.stringify(input) },
    ],
    finishReason: { unified: "tool-calls", raw: "tool_calls" },
    usage,
    warnings: [],
  };
}

const exporterOptions = {
  url: `${args.endpoint.replace(/\/$/, "")}/v1/traces`,
  headers: { Authorization: `Bearer ${args.key}` },
};
const exporter =
  args.variant === "json" ? new JsonExporter(exporterOptions) : new ProtoExporter(exporterOptions);
const sdk = new NodeSDK({ serviceName: `conformance-vercel-ai-${args.variant}`, traceExporter: exporter });
sdk.start();

const workspace = makeWorkspace();
try {
  const result = await generateText({
    model: new MockLanguageModelV3({ doGenerate: async (options) => nextTurn(options.prompt) }),
    system: "You are a careful assistant.",
    prompt: `Please do the ${args.session} task.`,
    tools: {
      read_file: tool({
        description: "Return the contents of a file of the workspace.",
        inputSchema: z.object({ path: z.string().describe("the file's path") }),
        execute: async ({ path }) => readFile(join(workspace, path), "utf8"),
      }),
      check_status: tool({
        description: "Return the status of a build job (always pending).",
        inputSchema: z.object({ job: z.string().describe("the job's name") }),
        execute: async () => "status: pending",
      }),
    },
    stopWhen: stepCountIs(session.calls.length + 1),
    experimental_telemetry: {
      isEnabled: true,
      functionId: "conformance-agent",
      metadata: { sessionId },
    },
  });
  console.log(`session ${sessionId}: ${result.steps.length} steps, answer: ${result.text}`);
} finally {
  rmSync(workspace, { recursive: true, force: true });
  await sdk.shutdown();
}
