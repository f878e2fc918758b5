#!/usr/bin/env python3
"""Reads the agent configurations out of docs/agents.md, as each agent host would read them.

Usage: agent_snippets.py DOCS/agents.md

Each configuration is the fenced block after an `<!-- agent-config: NAME -->` marker. This prints
one JSON object: {"server": {...}, "configs": [...]}, where the server is the HTTP server's command
line and each config is what one agent host would connect to:
  {"name", "transport": "stdio", "command", "args", "env"} or
  {"name", "transport": "http", "url", "headers"}.
Values a host takes from the environment (`$VAR`, `os.environ[...]`, `${env:VAR}`) come from this
process's environment; a VS Code `${input:...}` prompt is answered with MAF_SANDBOX_MCP_TOKEN, as
the user would. The Python-package block has no server: its imports from maf_sandbox are checked
against what the package exports. Any block this cannot read is an error (exit 1).
"""
import ast
import json
import os
import re
import shlex
import sys

EXPECTED = {
    "http-server", "claude-code-stdio", "claude-code-http", "claude-desktop", "vscode-stdio",
    "vscode-http", "agent-framework-mcp", "agent-framework-python", "langchain", "openai-agents",
}
MARKER = re.compile(r"^<!-- agent-config: ([a-z0-9-]+) -->\s*$")


class SnippetError(Exception):
    pass


def blocks(text):
    """(name, language, body) of each fenced block that follows a marker line."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        marker = MARKER.match(line)
        if not marker:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise SnippetError(f"marker '{marker.group(1)}' is not followed by a fenced block")
        language = lines[i + 1][3:].strip()
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise SnippetError(f"block '{marker.group(1)}' is not closed")
        found.append((marker.group(1), language, "\n".join(lines[i + 2:end])))
    return found


def shell_lines(body):
    """The block's command lines, with backslash continuations joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [shlex.split(line, comments=True) for line in joined.split("\n") if line.strip()]


def expand(token):
    missing = re.findall(r"\$\{?(\w+)", token)
    for name in missing:
        if name not in os.environ:
            raise SnippetError(f"the block needs ${name} in the environment")
    return os.path.expandvars(token)


def http_server(name, body):
    for words in shell_lines(body):
        if words and words[0] == "maf-sandbox":
            return {"command": words[0], "args": [expand(w) for w in words[1:]]}
    raise SnippetError(f"block '{name}' has no `maf-sandbox ...` line")


def claude_code(name, body):
    configs = []
    for words in shell_lines(body):
        if words[:3] != ["claude", "mcp", "add"]:
            continue
        words = [expand(w) for w in words[3:]]
        command = []
        if "--" in words:
            at = words.index("--")
            words, command = words[:at], words[at + 1:]
        transport, env, headers, positional = "stdio", {}, {}, []
        i = 0
        while i < len(words):
            word = words[i]
            if word in ("--transport", "-t"):
                transport = words[i + 1]
                i += 2
            elif word in ("--scope", "-s"):
                i += 2
            elif word in ("--env", "-e"):
                key, _, value = words[i + 1].partition("=")
                env[key] = value
                i += 2
            elif word in ("--header", "-H"):
                key, _, value = words[i + 1].partition(":")
                headers[key.strip()] = value.strip()
                i += 2
            elif word.startswith("-"):
                raise SnippetError(f"block '{name}': option {word} is not one this test knows")
            else:
                positional.append(word)
                i += 1
        if transport == "stdio":
            if not command:
                raise SnippetError(f"block '{name}': a stdio server needs `-- COMMAND ARGS`")
            configs.append({"transport": "stdio", "command": command[0], "args": command[1:],
                            "env": env})
        elif transport == "http":
            if len(positional) != 2:
                raise SnippetError(f"block '{name}': `--transport http` needs NAME URL")
            configs.append({"transport": "http", "url": positional[1], "headers": headers})
        else:
            raise SnippetError(f"block '{name}': transport {transport} is not tested")
    return configs


def json_value(value):
    """A VS Code or Claude Desktop string with its variables resolved."""
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_value(v) for v in value]
    if not isinstance(value, str):
        return value

    def resolve(match):
        kind, _, key = match.group(1).partition(":")
        if kind == "input":
            return os.environ["MAF_SANDBOX_MCP_TOKEN"]
        if kind == "env":
            return os.environ[key]
        raise SnippetError(f"variable ${{{match.group(1)}}} is not one this test knows")

    return re.sub(r"\$\{([^}]+)\}", resolve, value)


def json_servers(name, body, section):
    document = json.loads(body)
    servers = document.get(section)
    if not isinstance(servers, dict) or not servers:
        raise SnippetError(f"block '{name}' has no '{section}' object")
    configs = []
    for server in servers.values():
        server = json_value(server)
        if "url" in server:
            configs.append({"transport": "http", "url": server["url"],
                            "headers": server.get("headers", {})})
        else:
            configs.append({"transport": "stdio", "command": server["command"],
                            "args": server.get("args", []), "env": server.get("env", {})})
    return configs


def evaluate(node):
    """The value of a literal, an f-string, a sum of strings or a read of os.environ."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [evaluate(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {evaluate(k): evaluate(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.JoinedStr):
        return "".join(str(evaluate(v)) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        return evaluate(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return evaluate(node.left) + evaluate(node.right)
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
        return os.environ[evaluate(node.slice)]
    if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv"):
        return os.environ.get(*[evaluate(a) for a in node.args])
    raise SnippetError(f"cannot read `{ast.unparse(node)}`")


def from_params(params):
    if "url" in params:
        return {"transport": "http", "url": params["url"], "headers": params.get("headers", {})}
    return {"transport": "stdio", "command": params["command"], "args": params.get("args", []),
            "env": params.get("env", {})}


def python_servers(name, body):
    configs = []
    for node in ast.walk(ast.parse(body)):
        if not isinstance(node, ast.Call):
            continue
        callee = ast.unparse(node.func).split(".")[-1]
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if callee in ("MCPStdioTool", "MCPStreamableHTTPTool"):
            fields = {k: evaluate(keywords[k]) for k in ("command", "args", "env", "url", "headers")
                      if k in keywords}
            configs.append(from_params(fields))
        elif callee in ("MCPServerStdio", "MCPServerStreamableHttp"):
            configs.append(from_params(evaluate(keywords["params"])))
        elif callee == "MultiServerMCPClient":
            for server in evaluate(node.args[0]).values():
                transport = server.get("transport")
                if transport not in ("stdio", "streamable_http"):
                    raise SnippetError(f"block '{name}': transport {transport} is not tested")
                configs.append(from_params(server))
    return configs


def package_imports(name, body, package_init):
    """The block imports from maf_sandbox only names the package's __init__ brings in."""
    with open(package_init, encoding="utf-8") as f:
        init = ast.parse(f.read())
    exported = {alias.asname or alias.name for node in ast.walk(init)
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    imported = [alias.name for node in ast.walk(ast.parse(body))
                if isinstance(node, ast.ImportFrom) and node.module == "maf_sandbox"
                for alias in node.names]
    if not imported:
        raise SnippetError(f"block '{name}' imports nothing from maf_sandbox")
    unknown = sorted(set(imported) - exported)
    if unknown:
        raise SnippetError(f"block '{name}' imports {unknown}, which maf_sandbox does not export")


def main():
    docs = sys.argv[1]
    package_init = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(docs))), "src",
                                "python", "maf_sandbox", "__init__.py")
    with open(docs, encoding="utf-8") as f:
        found = blocks(f.read())
    names = [name for name, _, _ in found]
    if set(names) != EXPECTED or len(names) != len(set(names)):
        raise SnippetError(f"markers found {sorted(names)}, expected each of {sorted(EXPECTED)}")
    result = {"configs": []}
    for name, _, body in found:
        if name == "http-server":
            result["server"] = http_server(name, body)
            continue
        if name == "agent-framework-python":
            package_imports(name, body, package_init)
            continue
        if name.startswith("claude-code"):
            configs = claude_code(name, body)
        elif name == "claude-desktop":
            configs = json_servers(name, body, "mcpServers")
        elif name.startswith("vscode"):
            configs = json_servers(name, body, "servers")
        else:
            configs = python_servers(name, body)
        if not configs:
            raise SnippetError(f"block '{name}' names no server")
        for i, config in enumerate(configs):
            config["name"] = name if len(configs) == 1 else f"{name}#{i + 1}"
            result["configs"].append(config)
    json.dump(result, sys.stdout, indent=1)


if __name__ == "__main__":
    try:
        main()
    except (SnippetError, KeyError, ValueError, SyntaxError) as error:
        print(f"docs/agents.md: {error}", file=sys.stderr)
        sys.exit(1)
