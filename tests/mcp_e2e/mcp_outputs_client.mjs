// End-to-end check, with the official MCP TypeScript SDK, of the files `maf-sandbox mcp` hands
// back. Usage:
//   node mcp_outputs_client.mjs stdio|http <maf-sandbox binary> [--acas ENDPOINT CA_FILE TOKEN] [server flags...]
//
// One execute_code call draws an SVG chart and a PNG (plain Python: matplotlib is not needed) and
// writes a CSV, naming them in 'outputs': the charts come back as `image` content, the CSV as a
// `resource_link` the client reads with resources/read and finds in resources/list. Two sessions
// writing out.csv land in separate `--out-dir/<session>/<call>/` directories. upload_file then
// download_file of bytes with NUL bytes is byte-exact, and a program of the same conversation
// reads the upload.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [mode, binary, ...rest] = process.argv.slice(2);
if (!['stdio', 'http'].includes(mode) || !binary) {
    console.error('usage: node mcp_outputs_client.mjs stdio|http <maf-sandbox> [--acas ENDPOINT CA_FILE TOKEN] [server flags...]');
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
const scope = `e2e-out-${randomBytes(6).toString('hex')}`;
const outDir = mkdtempSync(join(tmpdir(), 'maf-mcp-e2e-out-'));
const flags = ['mcp', '--scope', scope, '--out-dir', outDir, ...serverFlags];

// Plain Python: an SVG bar chart, a 4x4 red PNG (zlib and struct only) and a CSV.
const chartProgram = `
import struct, zlib
rows = [(1, 3), (2, 5), (3, 4)]
bars = ''.join(f'<rect x="{x * 20}" y="{60 - y * 10}" width="15" height="{y * 10}" fill="steelblue"/>' for x, y in rows)
open('chart.svg', 'w').write(f'<svg xmlns="http://www.w3.org/2000/svg" width="100" height="60">{bars}</svg>')
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
raw = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * 4 for _ in range(4))
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 4, 4, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')
open('dot.png', 'wb').write(png)
open('out.csv', 'w').write('x,y\\n' + ''.join(f'{x},{y}\\n' for x, y in rows))
open('scratch.tmp', 'w').write('not asked for')
`;

function textOf(result) {
    return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

async function chartsAndCsv(client) {
    const result = await client.callTool({
        name: 'execute_code',
        arguments: { code: chartProgram, outputs: ['*.svg', '*.png', 'out.csv'] },
    });
    assert.equal(result.isError, false, textOf(result));
    const images = result.content.filter((c) => c.type === 'image');
    assert.deepEqual(images.map((i) => i.mimeType).sort(), ['image/png', 'image/svg+xml'], textOf(result));
    const svg = Buffer.from(images.find((i) => i.mimeType === 'image/svg+xml').data, 'base64').toString('utf8');
    assert.match(svg, /^<svg [^>]*>(<rect [^>]*\/>){3}<\/svg>$/);
    const png = Buffer.from(images.find((i) => i.mimeType === 'image/png').data, 'base64');
    assert.equal(png.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'a PNG signature');

    const links = result.content.filter((c) => c.type === 'resource_link');
    assert.deepEqual(links.map((l) => l.name).sort(), ['chart.svg', 'dot.png', 'out.csv'],
        'every returned file is a resource link; scratch.tmp was not asked for');
    const csv = links.find((l) => l.name === 'out.csv');
    assert.equal(csv.mimeType, 'text/csv');
    assert.match(csv.uri, /^maf-sandbox:\/\/output\/[0-9a-f]{32}\/out\.csv$/);
    const read = await client.readResource({ uri: csv.uri });
    assert.equal(read.contents.length, 1);
    assert.equal(read.contents[0].text, 'x,y\n1,3\n2,5\n3,4\n');
    const listed = await client.listResources();
    assert.ok(listed.resources.some((r) => r.uri === csv.uri), 'resources/list holds the CSV');
    const pngRead = await client.readResource({ uri: links.find((l) => l.name === 'dot.png').uri });
    assert.deepEqual(Buffer.from(pngRead.contents[0].blob, 'base64'), png, 'the PNG resource is the inline image');

    for (const output of result.structuredContent.outputs) {
        assert.ok(existsSync(join(outDir, output.landed_as)), `${output.landed_as} landed`);
    }
    await assert.rejects(client.readResource({ uri: csv.uri.replace(/[0-9a-f]{32}/, '0'.repeat(32)) }),
        (error) => error.code === -32002, 'a guessed URI is not served');
    return csv.uri;
}

async function uploadThenDownload(client) {
    const bytes = Buffer.concat([Buffer.from([0, 1, 2, 0, 255, 254, 0]), randomBytes(64 * 1024), Buffer.from([0])]);
    const uploaded = await client.callTool({
        name: 'upload_file',
        arguments: { path: 'inbox/data.bin', content_base64: bytes.toString('base64') },
    });
    assert.equal(uploaded.isError, false, textOf(uploaded));
    assert.equal(uploaded.structuredContent.size, bytes.length);
    const ran = await client.callTool({
        name: 'execute_code',
        arguments: { code: "d = open('../inbox/data.bin', 'rb').read()\nopen('../inbox/copy.bin', 'wb').write(d)\nprint(len(d), d.count(0))\n" },
    });
    assert.equal(ran.isError, false, textOf(ran));
    assert.equal(ran.structuredContent.stdout, `${bytes.length} ${bytes.filter((b) => b === 0).length}\n`);
    for (const path of ['inbox/data.bin', 'inbox/copy.bin']) {
        const downloaded = await client.callTool({ name: 'download_file', arguments: { path } });
        assert.equal(downloaded.isError, false, textOf(downloaded));
        const resource = downloaded.content.find((c) => c.type === 'resource').resource;
        assert.ok(Buffer.from(resource.blob, 'base64').equals(bytes), `${path} is byte-exact`);
    }
    const escaping = await client.callTool({ name: 'download_file', arguments: { path: '../../etc/passwd' } });
    assert.equal(escaping.isError, true, 'a path out of the work directory is refused');
}

// Each session writes out.csv with its own text; returns where it landed.
async function writeOutCsv(client, text) {
    const result = await client.callTool({
        name: 'execute_code',
        arguments: { code: `open('out.csv', 'w').write('${text}\\n')`, outputs: ['out.csv'] },
    });
    assert.equal(result.isError, false, textOf(result));
    return result.structuredContent.outputs[0].landed_as;
}

function checkSeparateLandings(landed) {
    const [first, second] = landed;
    assert.notEqual(first.split('/')[0], second.split('/')[0], 'two sessions, two directories');
    assert.equal(readFileSync(join(outDir, first), 'utf8'), 'first\n');
    assert.equal(readFileSync(join(outDir, second), 'utf8'), 'second\n');
}

function collect(stream) {
    const buffer = { text: '' };
    stream.setEncoding('utf8');
    stream.on('data', (chunk) => { buffer.text += chunk; });
    return buffer;
}

async function waitFor(predicate, what, ms = 10000) {
    const end = Date.now() + ms;
    while (!predicate()) {
        if (Date.now() > end) {
            throw new Error(`timed out waiting for ${what}`);
        }
        await new Promise((r) => setTimeout(r, 50));
    }
}

async function stdioClient() {
    const transport = new StdioClientTransport({ command: binary, args: flags, env, stderr: 'pipe' });
    const log = collect(transport.stderr);
    const client = new Client({ name: 'maf-sandbox-e2e-outputs', version: '1.0.0' });
    await client.connect(transport);
    return { client, log };
}

async function closeStdio({ client, log }) {
    await client.close();
    await waitFor(() => /ended: disposed/.test(log.text), 'the disposal line', 20000)
        .catch((error) => { throw new Error(`${error.message} in:\n${log.text}`); });
}

async function overStdio() {
    const one = await stdioClient();
    await chartsAndCsv(one.client);
    await uploadThenDownload(one.client);
    const two = await stdioClient();
    checkSeparateLandings([await writeOutCsv(one.client, 'first'), await writeOutCsv(two.client, 'second')]);
    await closeStdio(one);
    await closeStdio(two);
    console.log('stdio: charts as images, CSV as a resource, separate landings, byte-exact transfer ok');
}

async function overHttp() {
    const serverEnv = { ...env, MAF_SANDBOX_MCP_TOKEN: randomBytes(32).toString('hex') };
    const server = spawn(binary, [...flags, '--http', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'], env: serverEnv });
    const log = collect(server.stderr);
    const exited = new Promise((resolve) => server.on('exit', (code, signal) => resolve(code ?? signal)));
    try {
        await waitFor(() => /http:\/\/127\.0\.0\.1:\d+\/mcp/.test(log.text), 'the listening line');
        const url = new URL(log.text.match(/http:\/\/127\.0\.0\.1:\d+\/mcp/)[0]);
        const connect = async () => {
            const transport = new StreamableHTTPClientTransport(url, {
                requestInit: { headers: { Authorization: `Bearer ${serverEnv.MAF_SANDBOX_MCP_TOKEN}` } },
            });
            const client = new Client({ name: 'maf-sandbox-e2e-outputs', version: '1.0.0' });
            await client.connect(transport);
            return { client, transport };
        };
        const one = await connect();
        const two = await connect();
        const uri = await chartsAndCsv(one.client);
        await assert.rejects(two.client.readResource({ uri }), (error) => error.code === -32002,
            'another session cannot read the URI');
        await uploadThenDownload(one.client);
        const landed = await Promise.all([writeOutCsv(one.client, 'first'), writeOutCsv(two.client, 'second')]);
        checkSeparateLandings(landed);
        for (const { client, transport } of [one, two]) {
            const session = transport.sessionId;
            await transport.terminateSession();
            await client.close();
            await waitFor(() => new RegExp(`session ${session} ended: disposed`).test(log.text), 'the disposal line', 20000);
        }
        console.log('http: charts as images, CSV as a resource, separate landings, byte-exact transfer ok');
    } finally {
        server.kill('SIGTERM');
        const code = await exited;
        if (code !== 0) {
            console.error(log.text);
        }
        assert.equal(code, 0, 'the HTTP server exits cleanly on SIGTERM');
    }
}

let failed = false;
try {
    await (mode === 'stdio' ? overStdio() : overHttp());
    // Every landing is one directory per session holding one directory per call.
    for (const session of readdirSync(outDir)) {
        assert.match(session, /^[0-9a-f]{32}$/);
    }
} catch (error) {
    console.error(`mcp outputs e2e (${mode}) failed:`, error);
    failed = true;
} finally {
    rmSync(outDir, { recursive: true, force: true });
}
if (failed) {
    process.exit(1);
}
