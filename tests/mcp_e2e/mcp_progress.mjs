// Progress notifications of `maf-sandbox mcp`, seen through the official MCP TypeScript SDK's
// client (its `onprogress` and `resetTimeoutOnProgress` request options). Usage:
//   node mcp_progress.mjs stdio|http|both lines|long|heartbeat <maf-sandbox binary>
//        [--acas ENDPOINT CA_FILE TOKEN] [server flags...]
// lines:     a program printing a line every 100 ms for 3 s is seen line by line while it runs
//            (every line, in order, the arrivals spread over the run, not bunched at its end);
// long:      a 70-second job completes under the SDK's 60 s request timeout because progress
//            resets it, while the same job without the reset fails at 60 s (both run at once);
// heartbeat: a silent 14-second job completes under an 8 s timeout that progress resets: the
//            heartbeats alone keep it alive (the ACAS backend, which does not stream, sends only
//            them).
// Over http the calls are answered as server-sent events (the SDK asks for them). `both` runs
// the two transports at once, so a long scenario costs its duration once.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ErrorCode } from '@modelcontextprotocol/sdk/types.js';

const [mode, scenario, binary, ...rest] = process.argv.slice(2);
if (!['stdio', 'http', 'both'].includes(mode) || !['lines', 'long', 'heartbeat'].includes(scenario) || !binary) {
    console.error('usage: node mcp_progress.mjs stdio|http|both lines|long|heartbeat <maf-sandbox> [--acas ENDPOINT CA_FILE TOKEN] [server flags...]');
    process.exit(2);
}
const env = { ...process.env };
let serverFlags = rest;
if (rest[0] === '--acas') {
    const [, endpoint, caFile, token] = rest;
    Object.assign(env, {
        ACAS_SANDBOX_ENDPOINT: endpoint, ACAS_SANDBOX_CA_FILE: caFile, ACAS_SANDBOX_TOKEN: token,
        ACAS_SANDBOX_SUBSCRIPTION_ID: 'sub', ACAS_SANDBOX_RESOURCE_GROUP: 'rg',
        ACAS_SANDBOX_GROUP: 'grp', ACAS_SANDBOX_REGISTRY: 'reg.local',
    });
    serverFlags = rest.slice(4);
}
const scope = `e2e-progress-${randomBytes(6).toString('hex')}`;
// The long job needs a tool timeout beyond its 70 s.
const flags = ['mcp', '--scope', scope, '--timeout', '120', ...serverFlags];

function textOf(result) {
    return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

async function waitFor(predicate, what, ms) {
    const end = Date.now() + ms;
    while (!predicate()) {
        if (Date.now() > end) {
            throw new Error(`timed out waiting for ${what}`);
        }
        await new Promise((r) => setTimeout(r, 50));
    }
}

// A call that records every progress notification with its arrival time.
async function callRecording(client, name, args, options = {}) {
    const seen = [];
    const started = Date.now();
    const onprogress = (progress) => seen.push({ at: Date.now() - started, ...progress });
    const result = await client.callTool({ name, arguments: args }, CallToolResultSchema, { onprogress, ...options });
    return { result, seen, elapsed: Date.now() - started };
}

async function lines(client, label) {
    const code = 'import time\nfor i in range(30):\n    print(f"line-{i}", flush=True)\n    time.sleep(0.1)\n';
    const { result, seen, elapsed } = await callRecording(client, 'execute_code', { code });
    assert.equal(result.isError, false, textOf(result));
    // When each line first arrived.
    const arrival = new Map();
    for (const note of seen) {
        for (const match of (note.message ?? '').matchAll(/line-(\d+)/g)) {
            if (!arrival.has(Number(match[1]))) {
                arrival.set(Number(match[1]), note.at);
            }
        }
    }
    const order = [...arrival.keys()];
    assert.deepEqual(order, [...Array(30).keys()], `every line once, in order: ${JSON.stringify(seen)}`);
    const spread = arrival.get(29) - arrival.get(0);
    assert.ok(spread >= 2000, `the lines arrived over ${spread} ms of a 3 s run: ${JSON.stringify(seen)}`);
    const carriers = seen.filter((n) => /line-\d+/.test(n.message ?? '')).length;
    assert.ok(carriers >= 6, `${carriers} notifications carried lines (coalesced, not all at the end)`);
    // Rate-limited: a few per second at most.
    assert.ok(seen.length <= Math.ceil(elapsed / 250) + 6, `${seen.length} notifications in ${elapsed} ms`);
    for (let i = 1; i < seen.length; ++i) {
        assert.ok(seen[i].progress > seen[i - 1].progress, 'progress grows');
    }
    console.log(`${label}: 30 lines over ${spread} ms in ${carriers} notification(s) of ${seen.length}`);
}

async function long(client, label) {
    const args = { command: 'sleep 70; echo finished' };
    const kept = callRecording(client, 'run_shell', args, { timeout: 60000, resetTimeoutOnProgress: true });
    const control = callRecording(client, 'run_shell', args, { timeout: 60000 });
    const [alive, dropped] = await Promise.allSettled([kept, control]);
    assert.equal(alive.status, 'fulfilled', `the call with resetTimeoutOnProgress: ${alive.reason}`);
    const { result, seen, elapsed } = alive.value;
    assert.equal(result.isError, false, textOf(result));
    assert.equal(result.structuredContent.stdout, 'finished\n');
    assert.ok(elapsed >= 70000, `took ${elapsed} ms`);
    assert.ok(seen.filter((n) => /still running/.test(n.message ?? '')).length >= 10, JSON.stringify(seen));
    // The control: the same job, the same progress, but the SDK's timeout is not reset by it.
    assert.equal(dropped.status, 'rejected', 'without resetTimeoutOnProgress the SDK gives up');
    assert.equal(dropped.reason.code, ErrorCode.RequestTimeout, String(dropped.reason));
    console.log(`${label}: a ${elapsed} ms job completed under a 60 s timeout reset by ${seen.length} notification(s); without the reset it timed out`);
}

async function heartbeat(client, label) {
    const { result, seen, elapsed } = await callRecording(client, 'run_shell', { command: 'sleep 14; echo awake' },
        { timeout: 8000, resetTimeoutOnProgress: true });
    assert.equal(result.isError, false, textOf(result));
    assert.equal(result.structuredContent.stdout, 'awake\n');
    const beats = seen.filter((n) => /^still running after \d+ s$/.test(n.message ?? ''));
    assert.ok(beats.length >= 2, `heartbeats: ${JSON.stringify(seen)}`);
    console.log(`${label}: a ${elapsed} ms silent job completed under an 8 s timeout with ${beats.length} heartbeat(s)`);
}

const scenarios = { lines, long, heartbeat };

async function overStdio() {
    const transport = new StdioClientTransport({ command: binary, args: flags, env, stderr: 'pipe' });
    let log = '';
    transport.stderr.setEncoding('utf8');
    transport.stderr.on('data', (chunk) => { log += chunk; });
    const client = new Client({ name: 'maf-sandbox-progress-e2e', version: '1.0.0' });
    await client.connect(transport);
    try {
        await scenarios[scenario](client, 'stdio');
    } catch (error) {
        console.error(log);
        throw error;
    } finally {
        await client.close();
    }
    await waitFor(() => /ended: disposed/.test(log), 'the disposal line', 20000);
}

async function overHttp() {
    const serverEnv = { ...env };
    delete serverEnv.MAF_SANDBOX_MCP_TOKEN;
    const server = spawn(binary, [...flags, '--http', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'], env: serverEnv });
    let log = '';
    server.stderr.setEncoding('utf8');
    server.stderr.on('data', (chunk) => { log += chunk; });
    const exited = new Promise((resolve) => server.on('exit', (code) => resolve(code)));
    try {
        await waitFor(() => /http:\/\/127\.0\.0\.1:\d+\/mcp/.test(log), 'the listening line', 20000);
        const url = new URL(log.match(/http:\/\/127\.0\.0\.1:\d+\/mcp/)[0]);
        const token = log.match(/MCP bearer token[^\n]*\n([0-9a-f]{64})\n/)[1];
        const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
        const client = new Client({ name: 'maf-sandbox-progress-e2e', version: '1.0.0' });
        await client.connect(transport);
        const session = transport.sessionId;
        try {
            await scenarios[scenario](client, 'http');
        } finally {
            await transport.terminateSession();
            await client.close();
        }
        await waitFor(() => new RegExp(`session ${session} ended: disposed`).test(log), 'the disposal line', 20000);
    } catch (error) {
        console.error(log);
        throw error;
    } finally {
        server.kill('SIGTERM');
        assert.equal(await exited, 0, 'the HTTP server exits cleanly on SIGTERM');
    }
}

try {
    const runs = { stdio: [overStdio], http: [overHttp], both: [overStdio, overHttp] }[mode];
    await Promise.all(runs.map((run) => run()));
} catch (error) {
    console.error(`mcp progress e2e (${mode} ${scenario}) failed:`, error);
    process.exit(1);
}
