// Every agent configuration in docs/agents.md, run through the official MCP TypeScript SDK client.
// Usage: node agents_client.mjs <docs/agents.md> <agent_snippets.py>
//
// agent_snippets.py reads the configurations out of the page as each agent host would. Each stdio
// one is started with its exact command and arguments (`maf-sandbox` is found on PATH); the HTTP
// ones reach one server started from the page's server block, whose port is swapped for a free
// one (the page's fixed port could be taken on a shared machine) after checking that every URL
// names the server block's HOST:PORT. Each configuration lists the tools and makes one run_shell
// call whose output must come back.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [docs, extractor] = process.argv.slice(2);
const token = randomBytes(32).toString('hex');
const env = { ...process.env, MAF_SANDBOX_MCP_TOKEN: token };

const extracted = spawnSync('python3', [extractor, docs], { env, encoding: 'utf8' });
assert.equal(extracted.status, 0, `reading docs/agents.md failed:\n${extracted.stderr}`);
const { server, configs } = JSON.parse(extracted.stdout);

function collect(stream) {
    const buffer = { text: '' };
    stream.setEncoding('utf8');
    stream.on('data', (chunk) => { buffer.text += chunk; });
    return buffer;
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

// Lists the tools and runs one command; the configuration's name comes back on stdout.
async function oneCall(client, name) {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const tool of ['execute_code', 'run_shell']) {
        assert.ok(names.includes(tool), `${name}: tool ${tool} is listed (got ${names})`);
    }
    const word = `agents-md-${name.replace(/[^a-z0-9-]/g, '-')}`;
    const result = await client.callTool({ name: 'run_shell', arguments: { command: `echo ${word}` } });
    const text = result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
    assert.equal(result.isError, false, `${name}: ${text}`);
    assert.equal(result.structuredContent.stdout, `${word}\n`, `${name}: ${text}`);
}

async function overStdio(config) {
    const transport = new StdioClientTransport({
        command: config.command, args: config.args, env: { ...env, ...config.env }, stderr: 'pipe',
    });
    const log = collect(transport.stderr);
    const client = new Client({ name: 'agents-md', version: '1.0.0' });
    try {
        await client.connect(transport);
        await oneCall(client, config.name);
    } catch (error) {
        throw new Error(`${config.name} (${config.command} ${config.args.join(' ')}): ${error.message}\n${log.text}`);
    } finally {
        await client.close();
    }
    await waitFor(() => /ended: disposed/.test(log.text), `${config.name}: the disposal line`, 15000);
}

async function overHttp(config, origin) {
    const url = new URL(config.url);
    assert.equal(url.host, server.listen, `${config.name}: the URL names the server block's address`);
    const reached = new URL(url.pathname, origin);
    const transport = new StreamableHTTPClientTransport(reached, { requestInit: { headers: config.headers } });
    const client = new Client({ name: 'agents-md', version: '1.0.0' });
    await client.connect(transport);
    try {
        await oneCall(client, config.name);
    } finally {
        await transport.terminateSession();
        await client.close();
    }
}

async function main() {
    const at = server.args.indexOf('--http');
    assert.ok(at >= 0, 'the server block serves --http HOST:PORT');
    server.listen = server.args[at + 1];
    const args = [...server.args];
    args[at + 1] = server.listen.replace(/:\d+$/, ':0');
    const http = spawn(server.command, args, { stdio: ['ignore', 'ignore', 'pipe'], env });
    const log = collect(http.stderr);
    const exited = new Promise((resolve) => http.on('exit', (code) => resolve(code)));
    let ran = 0;
    try {
        await waitFor(() => /http:\/\/127\.0\.0\.1:\d+\/mcp/.test(log.text), 'the HTTP server', 20000)
            .catch((error) => { throw new Error(`${error.message}:\n${log.text}`); });
        const origin = new URL(log.text.match(/http:\/\/127\.0\.0\.1:\d+\/mcp/)[0]).origin;
        assert.ok(!log.text.includes(token), 'a token given in the environment is never printed');
        for (const config of configs) {
            await (config.transport === 'stdio' ? overStdio(config) : overHttp(config, origin));
            console.log(`ok: ${config.name} (${config.transport})`);
            ran += 1;
        }
    } finally {
        http.kill('SIGTERM');
        const code = await exited;
        if (code !== 0) {
            console.error(log.text);
        }
        assert.equal(code, 0, 'the HTTP server exits cleanly on SIGTERM');
    }
    assert.ok(ran >= 10, `every configuration ran (${ran})`);
    console.log(`docs/agents.md: ${ran} configurations ok`);
}

try {
    await main();
} catch (error) {
    console.error('docs/agents.md configurations failed:', error);
    process.exit(1);
}
