// End-to-end check of `maf-sandbox mcp` with the official MCP TypeScript SDK, a client this project
// did not write. Usage:
//   node mcp_client.mjs stdio|http <maf-sandbox binary> [--acas ENDPOINT CA_FILE TOKEN] [server flags...]
// (--acas: the server and `ls` reach an acas-emulator through the ACAS_SANDBOX_* environment).
//
// Connects, lists the tools, runs code and a shell command, checks program output and errors,
// disconnects, and then checks that the server disposed the session's sandboxes: the server logs
// one line per ended session ("session <id> ended: disposed N sandbox(es)") on stderr. A second
// session then proves conversation reuse: two run_shell calls, the second reads the file the
// first wrote, and the backend's own listing (`maf-sandbox ls`) holds exactly one sandbox for the
// session, and none once it ended.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';

const [mode, binary, ...rest] = process.argv.slice(2);
if (!['stdio', 'http'].includes(mode) || !binary) {
    console.error('usage: node mcp_client.mjs stdio|http <maf-sandbox> [--acas ENDPOINT CA_FILE TOKEN] [server flags...]');
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
const backendAt = serverFlags.indexOf('--backend');
const backend = backendAt >= 0 ? serverFlags[backendAt + 1] : 'local';
// The in-process backend scripts exec instead of running anything: output checks are relaxed.
const runsCode = backend !== 'in-process';
// A scope of this run's own, so the listing counts no other test's sandboxes.
const scope = `e2e-${randomBytes(6).toString('hex')}`;
// Disposal on the ACAS backend is a round of REST calls to the emulator, not a local teardown.
const exitBoundMs = backend === 'acas' ? 15000 : 2500;

const store = mkdtempSync(join(tmpdir(), 'maf-mcp-e2e-store-'));
writeFileSync(join(store, 'numbers.csv'), '1\n2\n39\n');
const flags = ['mcp', '--files', store, '--scope', scope, ...serverFlags];

function textOf(result) {
    return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

// Records the protocol revision the server answered the SDK's initialize with.
function recordNegotiation(transport) {
    const seen = { version: null };
    let handler;
    Object.defineProperty(transport, 'onmessage', {
        configurable: true,
        get: () => handler && ((message) => {
            if (message?.result?.protocolVersion) {
                seen.version = message.result.protocolVersion;
            }
            handler(message);
        }),
        set: (h) => { handler = h; },
    });
    return seen;
}

// A client's cancellation (an AbortSignal) is normal: the server logs it in one info line, with
// none of its machinery's own words.
async function cancellation(client, log) {
    const controller = new AbortController();
    const call = client.callTool({ name: 'run_shell', arguments: { command: 'sleep 5' } }, undefined,
        { signal: controller.signal });
    await new Promise((r) => setTimeout(r, 700));
    controller.abort('the user changed their mind');
    await assert.rejects(call);
    await waitFor(() => /was cancelled and cleaned up/.test(log.text), 'the cancellation line', 20000)
        .catch((error) => { throw new Error(`${error.message} in:\n${log.text}`); });
    const lines = log.text.split('\n').filter((l) => /cancel/i.test(l));
    assert.equal(lines.length, 1, `one line about the cancellation:\n${log.text}`);
    assert.match(lines[0], /^info: session [0-9a-f]{32}: request \S+ was cancelled and cleaned up$/);
    for (const internal of ['Operation canceled', 'asio', 'boost', 'system:']) {
        assert.ok(!log.text.includes(internal), `'${internal}' in the server's log:\n${log.text}`);
    }
}

async function exercise(client, session, log) {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ['download_file', 'execute_code', 'run_shell', 'upload_file']);
    for (const tool of tools) {
        assert.equal(tool.annotations.openWorldHint, false, `${tool.name}: egress is closed`);
        assert.match(tool.description, /isolation \w+/);
        assert.match(tool.description, /egress closed/);
        assert.equal(tool.inputSchema.type, 'object');
    }
    const code = tools.find((t) => t.name === 'execute_code');
    assert.deepEqual(code.inputSchema.required, ['code']);

    const sum = await client.callTool({
        name: 'execute_code',
        arguments: {
            code: "import sys\nprint(sum(int(l) for l in open('numbers.csv')))\nprint('note', file=sys.stderr)\n",
            input_files: ['numbers.csv'],
        },
    });
    assert.equal(sum.isError, false, textOf(sum));
    assert.ok(sum.structuredContent.backend);
    assert.equal(sum.structuredContent.egress, 'closed');
    if (runsCode) {
        assert.equal(sum.structuredContent.stdout, '42\n');
        assert.equal(sum.structuredContent.stderr, 'note\n');
        assert.equal(sum.structuredContent.exit_code, 0);
    }

    const failing = await client.callTool({
        name: 'execute_code',
        arguments: { code: "raise SystemExit('bad input')" },
    });
    // A program's own failure fails the call, with its exit code and stderr for the model.
    assert.equal(failing.isError, true, textOf(failing));
    if (runsCode) {
        assert.equal(failing.structuredContent.exit_code, 1);
        assert.match(failing.structuredContent.stderr, /bad input/);
    }

    const absent = await client.callTool({
        name: 'execute_code',
        arguments: { code: 'print(1)', input_files: ['../../etc/passwd'] },
    });
    assert.equal(absent.isError, true);
    assert.match(textOf(absent), /is not in the file store/);

    await assert.rejects(
        client.callTool({ name: 'run_shell', arguments: { command: 'true', thread_id: 'other' } }),
        (error) => error.code === -32602,
        'an argument naming key material is refused as invalid params',
    );
    await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }),
        (error) => error.code === -32602);

    const shell = await client.callTool({
        name: 'run_shell',
        arguments: { command: 'echo hello; echo oops >&2; exit 3' },
    });
    assert.equal(shell.isError, true, 'a non-zero exit is an error result');
    if (runsCode) {
        assert.equal(shell.structuredContent.stdout, 'hello\n');
        assert.equal(shell.structuredContent.stderr, 'oops\n');
        assert.equal(shell.structuredContent.exit_code, 3);
    }
    assert.match(textOf(shell), /\[sandbox: backend \S+, isolation \S+, egress closed\]/);
    if (runsCode) {
        await cancellation(client, log);
    }
}

// Under a 2-second timeout: the call is an error result saying the program was stopped.
async function timedOut(client) {
    const slow = await client.callTool({ name: 'run_shell', arguments: { command: 'echo begun; sleep 30' } });
    assert.equal(slow.isError, true, textOf(slow));
    assert.match(textOf(slow), /did not finish within 2 seconds/);
    if (backend === 'local') {
        // A local sandbox keeps what the program printed before the deadline.
        assert.match(textOf(slow), /output before the timeout:[\s\S]*begun/);
    }
}

// The backend's own listing of the session's live sandboxes (the local registry, or the
// emulator's sandbox group), through `maf-sandbox ls`.
function sandboxesOf(session) {
    const listed = spawnSync(binary, ['ls', '--backend', backend, '--json', '--label', `scope=${scope}`,
        '--label', `thread=${session}`], { env, encoding: 'utf8' });
    assert.equal(listed.status, 0, `maf-sandbox ls failed: ${listed.stderr}`);
    return JSON.parse(listed.stdout).filter((s) => !/^delet/i.test(s.state ?? ''));
}

// Two calls of one conversation: the second sees what the first left, in the one sandbox.
async function conversationReuse(client, session) {
    const first = await client.callTool({
        name: 'run_shell',
        arguments: { command: 'echo kept-by-the-conversation > ../reuse.txt' },
    });
    assert.equal(first.isError, false, textOf(first));
    assert.equal(first.structuredContent.exit_code, 0, textOf(first));
    const second = await client.callTool({ name: 'run_shell', arguments: { command: 'cat ../reuse.txt' } });
    assert.equal(second.isError, false, textOf(second));
    assert.equal(second.structuredContent.stdout, 'kept-by-the-conversation\n', textOf(second));
    const listed = sandboxesOf(session);
    assert.equal(listed.length, 1, `one sandbox for the conversation: ${JSON.stringify(listed)}`);
    assert.equal(listed[0].labels.kind, 'shell');
    assert.equal(listed[0].labels.call, undefined, 'a conversation sandbox names no call');
}

function collect(stream) {
    const buffer = { text: '' };
    stream.setEncoding('utf8');
    stream.on('data', (chunk) => { buffer.text += chunk; });
    return buffer;
}

async function waitFor(predicate, what, ms = 5000) {
    const end = Date.now() + ms;
    while (!predicate()) {
        if (Date.now() > end) {
            throw new Error(`timed out waiting for ${what}`);
        }
        await new Promise((r) => setTimeout(r, 50));
    }
}

function disposalLine(log, session) {
    const match = log.match(new RegExp(`session ${session} ended: disposed (\\d+) sandbox`));
    return match ? Number(match[1]) : null;
}

// One stdio session (one server process): `body(client, session)`, then EOF; returns how many
// sandboxes the server said it disposed.
async function stdioSession(body, extraFlags = []) {
    const transport = new StdioClientTransport({ command: binary, args: [...flags, ...extraFlags], env, stderr: 'pipe' });
    const log = collect(transport.stderr);
    const negotiated = recordNegotiation(transport);
    const client = new Client({ name: 'maf-sandbox-e2e', version: '1.0.0' });
    await client.connect(transport);
    assert.equal(negotiated.version, LATEST_PROTOCOL_VERSION, 'the SDK\'s own revision is negotiated');
    await waitFor(() => /session [0-9a-f]{32} opened/.test(log.text), 'the session line');
    const session = log.text.match(/session ([0-9a-f]{32}) opened/)[1];
    await body(client, session, log);
    const started = Date.now();
    await client.close();  // ends stdin; the server must dispose and exit promptly
    await waitFor(() => /ended: disposed/.test(log.text), 'the disposal line', exitBoundMs + 500);
    const disposed = disposalLine(log.text, session);
    assert.ok(disposed >= 1, `sandboxes of session ${session} disposed:\n${log.text}`);
    assert.ok(Date.now() - started < exitBoundMs, `the server exited within ${exitBoundMs} ms of EOF`);
    return { session, disposed };
}

async function overStdio() {
    const { session, disposed } = await stdioSession(exercise);
    console.log(`stdio: ok (session ${session}, ${disposed} sandbox(es) disposed)`);
    if (!runsCode) {
        console.log('stdio: conversation reuse needs a backend that runs code; not checked on in-process');
        return;
    }
    const reuse = await stdioSession(conversationReuse);
    assert.equal(reuse.disposed, 1, 'the conversation held one sandbox');
    assert.deepEqual(sandboxesOf(reuse.session), [], 'nothing outlives the session');
    console.log(`stdio: conversation reuse ok (session ${reuse.session}, one sandbox)`);
    const slow = await stdioSession(timedOut, ['--timeout', '2']);
    console.log(`stdio: a timed-out call is an error result (session ${slow.session})`);
}

async function overHttp() {
    const serverEnv = { ...env };
    delete serverEnv.MAF_SANDBOX_MCP_TOKEN;  // the server generates and prints one
    const server = spawn(binary, [...flags, '--http', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'], env: serverEnv });
    const log = collect(server.stderr);
    const exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));
    try {
        await waitFor(() => /http:\/\/127\.0\.0\.1:\d+\/mcp/.test(log.text), 'the listening line');
        const url = new URL(log.text.match(/http:\/\/127\.0\.0\.1:\d+\/mcp/)[0]);
        // The server printed the bearer token it generated (no MAF_SANDBOX_MCP_TOKEN was set).
        const token = log.text.match(/MCP bearer token[^\n]*\n([0-9a-f]{64})\n/)[1];
        const initialize = JSON.stringify({
            jsonrpc: '2.0', id: 0, method: 'initialize',
            params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'e2e', version: '1' } },
        });
        const anonymous = await fetch(url, {
            method: 'POST',
            headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
            body: initialize,
        });
        assert.equal(anonymous.status, 401, 'a request without the token is refused');
        // Every revision the SDK supports is answered in its own terms.
        for (const version of SUPPORTED_PROTOCOL_VERSIONS) {
            const answer = await fetch(url, {
                method: 'POST',
                headers: { Authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
                body: initialize.replace('2025-06-18', version),
            });
            assert.equal(answer.status, 200);
            const body = await answer.json();
            assert.equal(body.result.protocolVersion, version, `initialize with ${version}`);
            await fetch(url, { method: 'DELETE', headers: { Authorization: `Bearer ${token}`, 'mcp-session-id': answer.headers.get('mcp-session-id') } });
        }
        assert.match(anonymous.headers.get('www-authenticate') ?? '', /^Bearer/);
        const authorization = { Authorization: `Bearer ${token}` };
        const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: authorization } });
        const client = new Client({ name: 'maf-sandbox-e2e', version: '1.0.0' });
        await client.connect(transport);
        assert.equal(transport.protocolVersion, LATEST_PROTOCOL_VERSION, 'the SDK\'s own revision is negotiated');
        const session = transport.sessionId;
        assert.match(session, /^[0-9a-f]{32}$/);
        await exercise(client, session, log);
        await transport.terminateSession();  // DELETE /mcp
        await client.close();
        await waitFor(() => disposalLine(log.text, session) !== null, 'the disposal line', exitBoundMs);
        const disposed = disposalLine(log.text, session);
        assert.ok(disposed >= 1, `sandboxes of session ${session} disposed:\n${log.text}`);
        // The ended session is gone: reusing its id is refused.
        const stale = await fetch(url, {
            method: 'POST',
            headers: { ...authorization, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': session },
            body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
        });
        assert.equal(stale.status, 404);
        console.log(`http: ok (session ${session}, ${disposed} sandbox(es) disposed)`);
        if (!runsCode) {
            console.log('http: conversation reuse needs a backend that runs code; not checked on in-process');
            return;
        }
        const reuseTransport = new StreamableHTTPClientTransport(url, { requestInit: { headers: authorization } });
        const reuseClient = new Client({ name: 'maf-sandbox-e2e', version: '1.0.0' });
        await reuseClient.connect(reuseTransport);
        const reuse = reuseTransport.sessionId;
        await conversationReuse(reuseClient, reuse);
        await reuseTransport.terminateSession();
        await reuseClient.close();
        await waitFor(() => disposalLine(log.text, reuse) !== null, 'the reuse session\'s disposal line', exitBoundMs);
        assert.equal(disposalLine(log.text, reuse), 1, 'the conversation held one sandbox');
        assert.deepEqual(sandboxesOf(reuse), [], 'nothing outlives the session');
        console.log(`http: conversation reuse ok (session ${reuse}, one sandbox)`);
    } finally {
        server.kill('SIGTERM');
        const { code } = await exited;
        if (code !== 0) {
            console.error(log.text);
        }
        assert.equal(code, 0, 'the HTTP server exits cleanly on SIGTERM');
    }
}

let failed = false;
try {
    await (mode === 'stdio' ? overStdio() : overHttp());
} catch (error) {
    console.error(`mcp e2e (${mode}) failed:`, error);
    failed = true;
} finally {
    rmSync(store, { recursive: true, force: true });
}
if (failed) {
    process.exit(1);
}
