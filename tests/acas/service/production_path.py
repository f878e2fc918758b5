#!/usr/bin/env python3
"""The production path, end to end, inside a network and mount namespace this test creates.

    production_path.py MAF_SANDBOX ACAS_EMULATOR [CASE...]

acas-emulator impersonates the service (--impersonate-service) at the address the test's own
hosts file gives management.eastus2.azuredevcompute.io; the identity stand-ins (standins.py)
serve at login.microsoftonline.com, 169.254.169.254 and Container Apps' IDENTITY_ENDPOINT, and a
fake `az` is on PATH. The client, `maf-sandbox conformance --backend acas` with nothing but the
real endpoint and group, has no address override and no CA option: it trusts the test CA through
the system bundle, which the private mount namespace replaces, as it replaces /etc/hosts. The
host's own network, /etc/hosts and trust store are never touched; everything the test starts ends
with the namespaces.

Each case prints PASS or FAIL with why; the test fails when any case fails.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # the source tree stays as checked out
sys.path.insert(0, HERE)
import standins  # noqa: E402

REGION_HOST = "management.eastus2.azuredevcompute.io"
EMULATOR_HOST = "management.westus3.azuredevcompute.io"  # the plain emulator, for the header case
SERVICE_ADDRESS = "10.226.0.10"
EMULATOR_ADDRESS = "10.226.0.11"
LOGIN_ADDRESS = "10.226.0.20"
IMDS_ADDRESS = "169.254.169.254"
APP_SERVICE_PORT = 42356  # Container Apps' IDENTITY_ENDPOINT is http://localhost:42356/msi/token
TENANT = "72f988bf-0000-4000-8000-0000000000aa"
CLIENT_ID = "5d2b7a11-0000-4000-8000-0000000000bb"
SECRET = "s3cr3t-Value~ThatMustNeverBePrinted"
IDENTITY_HEADER = "identity-header-that-must-never-be-printed"
SUBSCRIPTION, RESOURCE_GROUP, GROUP = "sub-e2e", "rg-e2e", "group-e2e"


def run(*argv, **kwargs):
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kwargs)


def make_pki(work):
    """A test CA, one server certificate for every stand-in name, the issuer key, a client cert."""
    def path(name):
        return os.path.join(work, name)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", path("ca.key"),
        "-out", path("ca.pem"), "-days", "2", "-subj", "/CN=maf-sandbox production-path test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", path("server.key"),
        "-out", path("server.csr"), "-subj", f"/CN={REGION_HOST}")
    with open(path("server.ext"), "w", encoding="utf-8") as ext:
        ext.write("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                  f"subjectAltName=DNS:{REGION_HOST},DNS:{EMULATOR_HOST},"
                  "DNS:login.microsoftonline.com\n")
    run("openssl", "x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey",
        path("ca.key"), "-CAcreateserial", "-out", path("server.pem"), "-days", "2",
        "-extfile", path("server.ext"))
    run("openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
        "-out", path("issuer.key"))
    with open(path("issuer.pub"), "w", encoding="utf-8") as pub:
        pub.write(run("openssl", "pkey", "-in", path("issuer.key"), "-pubout").stdout)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", path("client.key"),
        "-out", path("client.crt"), "-days", "2", "-subj", "/CN=maf-sandbox e2e client")
    with open(path("client.pem"), "w", encoding="utf-8") as both:
        for name in ("client.key", "client.crt"):
            with open(path(name), encoding="utf-8") as part:
                both.write(part.read())
    os.chmod(path("client.pem"), 0o600)


def enter_private_world(work):
    """The namespace's network, and the client's hosts file and trust store over the host's."""
    run("ip", "link", "set", "lo", "up")
    # A veth pair that stays inside the namespace: the stand-ins' addresses are off loopback.
    run("ip", "link", "add", "standins", "type", "veth", "peer", "name", "standins-peer")
    run("ip", "link", "set", "standins", "up")
    run("ip", "link", "set", "standins-peer", "up")
    for address in (SERVICE_ADDRESS, EMULATOR_ADDRESS, LOGIN_ADDRESS, IMDS_ADDRESS):
        run("ip", "addr", "add", f"{address}/32", "dev", "standins")
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w", encoding="utf-8") as out:
        out.write(f"127.0.0.1 localhost\n{SERVICE_ADDRESS} {REGION_HOST}\n"
                  f"{EMULATOR_ADDRESS} {EMULATOR_HOST}\n{LOGIN_ADDRESS} login.microsoftonline.com\n")
    bundle = os.path.join(work, "ca-bundle.crt")
    shutil.copy(os.path.join(work, "ca.pem"), bundle)
    run("mount", "--make-rprivate", "/")
    run("mount", "--bind", hosts, "/etc/hosts")
    system_bundle = os.path.realpath("/etc/ssl/certs/ca-certificates.crt")
    run("mount", "--bind", bundle, system_bundle)


class Emulator:
    def __init__(self, binary, work, name, extra):
        self.state = os.path.join(work, name)
        os.mkdir(self.state, 0o700)
        self.log = open(os.path.join(work, f"{name}.log"), "w", encoding="utf-8")
        self.process = subprocess.Popen(
            [binary, "serve", "--state-dir", self.state, "--alias", "ubuntu=host",
             "--tls-cert", os.path.join(work, "server.pem"),
             "--tls-key", os.path.join(work, "server.key"), "--allow-remote", *extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        first = self.process.stdout.readline()
        if not first.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"{name} did not start: {first!r}; see {self.log.name}")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def supervisors_under(directory):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "maf-sandbox-supervisor" in cmdline and directory in cmdline:
            found.append(int(pid))
    return found


def end_sandboxes_under(directory):
    """The emulator leaves its sandboxes running when it stops: end the ones this test made."""
    for pid in supervisors_under(directory):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 20
    while supervisors_under(directory) and time.monotonic() < deadline:
        time.sleep(0.1)


class World:
    def __init__(self, maf_sandbox, emulator, work):
        self.maf_sandbox, self.emulator_binary, self.work = maf_sandbox, emulator, work
        self.journal_path = os.path.join(work, "journal.jsonl")
        self.journal = standins.Journal(self.journal_path)
        self.issuer = standins.Issuer(os.path.join(work, "issuer.key"), TENANT)
        self.federated_token_file = os.path.join(work, "federated-token")
        with open(self.federated_token_file, "w", encoding="utf-8") as out:
            out.write(self.issuer.mint("api://AzureADTokenExchange", "system:serviceaccount:e2e")[0])
        with open(self.federated_token_file, encoding="utf-8") as f:
            federated = f.read()
        self.entra = standins.serve_forever(
            standins.EntraServer((LOGIN_ADDRESS, 443), self.issuer, self.journal,
                                 client_id=CLIENT_ID, secret=SECRET,
                                 certificate=os.path.join(work, "client.crt"),
                                 federated_token=federated),
            tls=(os.path.join(work, "server.pem"), os.path.join(work, "server.key")))
        self.app_service = standins.serve_forever(
            standins.AppServiceServer(("127.0.0.1", APP_SERVICE_PORT), self.issuer, self.journal,
                                      path="/msi/token", header=IDENTITY_HEADER))
        self.imds = None
        self.az_dir = os.path.join(work, "az-bin")
        os.mkdir(self.az_dir)
        self.az_config = os.path.join(work, "az.json")
        self.write_az_config()
        with open(os.path.join(self.az_dir, "az"), "w", encoding="utf-8") as az:
            az.write(f"#!{sys.executable} -B\nimport sys\nsys.path.insert(0, {HERE!r})\n"
                     "import standins\n"
                     f"sys.exit(standins.az_main({self.az_config!r}, sys.argv[1:]))\n")
        os.chmod(os.path.join(self.az_dir, "az"), 0o755)
        self.service = Emulator(emulator, work, "service",
                                ["--listen", f"{SERVICE_ADDRESS}:443", "--impersonate-service",
                                 "--issuer-key", os.path.join(work, "issuer.pub"),
                                 "--tenant", TENANT])

    def write_az_config(self):
        with open(self.az_config, "w", encoding="utf-8") as out:
            json.dump({"journal": self.journal_path, "issuer_key": self.issuer.key_path,
                       "tenant": TENANT, "misissue": self.issuer.misissue}, out)

    def start_imds(self):
        self.imds = standins.serve_forever(
            standins.ImdsServer((IMDS_ADDRESS, 80), self.issuer, self.journal))

    def stop_imds(self):
        if self.imds is not None:
            self.imds.shutdown()
            self.imds.server_close()
            self.imds = None

    def close(self):
        self.stop_imds()
        self.service.stop()
        for server in (self.entra, self.app_service):
            server.shutdown()
            server.server_close()
        end_sandboxes_under(self.work)

    def entries(self):
        if not os.path.exists(self.journal_path):
            return []
        with open(self.journal_path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def client(self, command, env_extra, endpoint=f"https://{REGION_HOST}", timeout=600,
               trailing=()):
        """maf-sandbox as a production host runs it: the real endpoint, nothing overridden."""
        home = os.path.join(self.work, "home")
        os.makedirs(home, exist_ok=True)
        env = {"PATH": f"{self.az_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": home,
               "MAF_SANDBOX_STATE_DIR": os.path.join(self.work, "client-state"), **env_extra}
        argv = [self.maf_sandbox, command, "--backend", "acas", "--endpoint", endpoint,
                "--subscription-id", SUBSCRIPTION, "--resource-group", RESOURCE_GROUP,
                "--sandbox-group", GROUP, *trailing]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def conformance_passed(done):
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"
    last = lines[-1]
    if not last.split(" passed, ")[-1].startswith("0 failed"):
        return f"summary: {last}"
    for suite in ("FILES_OUT", "FILES_IN", "EXEC", "FILES_DELETE"):
        if not any(line.startswith(suite) and "PASS" in line for line in lines):
            return f"no {suite} probe passed"
    return None


def secrets_shown(world, text):
    tokens = [e["token"] for e in world.entries() if e.get("token")]
    shown = [s for s in (SECRET, IDENTITY_HEADER) if s in text]
    shown += ["an issued token" for t in tokens if t in text or t.split(".")[2] in text]
    return shown


def credential_case(world, env, endpoint, flow=None):
    open(world.journal_path, "w").close()
    # The floor is microvm: the run is refused unless the backend declares it (real-service mode).
    done = world.client("conformance", env, trailing=("--floor", "microvm"))
    failure = conformance_passed(done)
    if failure:
        return failure
    served = [e for e in world.entries() if e["ok"]]
    if not served or any(e["endpoint"] != endpoint for e in served):
        return f"expected tokens from {endpoint} only, the journal says {served}"
    if flow and any(e.get("flow") != flow for e in served):
        return f"expected the {flow} flow, the journal says {served}"
    if any(not e["ok"] for e in world.entries()):
        return f"a stand-in refused a request: {[e for e in world.entries() if not e['ok']]}"
    if secrets_shown(world, done.stdout + done.stderr):
        return "the output shows a secret or a token"
    return None


ENTRA_ENV = {"AZURE_TENANT_ID": TENANT, "AZURE_CLIENT_ID": CLIENT_ID}


def case_client_secret(world):
    return credential_case(world, {**ENTRA_ENV, "AZURE_CLIENT_SECRET": SECRET}, "entra",
                           "client_secret")


def case_client_certificate(world):
    return credential_case(world, {**ENTRA_ENV, "AZURE_CLIENT_CERTIFICATE_PATH":
                                   os.path.join(world.work, "client.pem")},
                           "entra", "client_certificate")


def case_workload_identity(world):
    return credential_case(world, {**ENTRA_ENV,
                                   "AZURE_FEDERATED_TOKEN_FILE": world.federated_token_file},
                           "entra", "workload_identity")


def case_imds(world):
    world.start_imds()
    try:
        return credential_case(world, {}, "imds")
    finally:
        world.stop_imds()


def case_app_service(world):
    return credential_case(world, {"IDENTITY_ENDPOINT":
                                   f"http://localhost:{APP_SERVICE_PORT}/msi/token",
                                   "IDENTITY_HEADER": IDENTITY_HEADER}, "app_service")


def case_azure_cli(world):
    # Nothing at 169.254.169.254 answers: the chain falls through managed identity to `az`.
    return credential_case(world, {}, "az")


def refused_case(world, misissue, expected):
    world.issuer.misissue = misissue
    open(world.journal_path, "w").close()
    try:
        done = world.client("run", {**ENTRA_ENV, "AZURE_CLIENT_SECRET": SECRET}, timeout=120,
                            trailing=("--", "true"))
    finally:
        world.issuer.misissue = None
    text = done.stdout + done.stderr
    if done.returncode == 0:
        return "the command succeeded with a misissued token"
    if expected not in text:
        return f"the error does not say {expected!r}: {done.stderr.strip()[-1500:]}"
    if not any(e["ok"] for e in world.entries()):
        return f"no token was issued, so the service was never asked: {world.entries()}"
    shown = secrets_shown(world, text)
    if shown:
        return f"the error shows {shown}"
    return None


def case_wrong_scope(world):
    return refused_case(world, "audience", "audience must be https://dynamicsessions.io")


def case_expired_token(world):
    return refused_case(world, "expired", "the token has expired")


def case_tenant_mismatch(world):
    return refused_case(world, "tenant", "another tenant")


def case_emulator_header_refused(world):
    plain = Emulator(world.emulator_binary, world.work, "plain-emulator",
                     ["--listen", f"{EMULATOR_ADDRESS}:443", "--token", "plain-token"])
    try:
        done = world.client("conformance", {"ACAS_SANDBOX_TOKEN": "plain-token"},
                            endpoint=f"https://{EMULATOR_HOST}", timeout=120)
    finally:
        plain.stop()
    if done.returncode == 0:
        return "real-service mode accepted an emulator's answers"
    if "answered as an acas-emulator while emulator mode is off" not in done.stdout + done.stderr:
        return f"not refused for the emulator's header: {done.stderr.strip()[-1500:]}"
    return None


def case_live_suite(world):
    """tests/acas/live, unchanged, against the impersonating service; egress is the real one's."""
    binary = os.environ.get("MAF_ACAS_LIVE_TESTS")
    if not binary:
        return "MAF_ACAS_LIVE_TESTS does not name the live suite's program"
    open(world.journal_path, "w").close()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.join(world.work, "home"),
           **ENTRA_ENV, "AZURE_CLIENT_SECRET": SECRET,
           "ACAS_SANDBOX_ENDPOINT": f"https://{REGION_HOST}",
           "ACAS_SANDBOX_SUBSCRIPTION_ID": SUBSCRIPTION,
           "ACAS_SANDBOX_RESOURCE_GROUP": RESOURCE_GROUP, "ACAS_SANDBOX_GROUP": GROUP,
           "MAF_SANDBOX_ACAS_E2E_IMAGE": "host", "MAF_SANDBOX_ACAS_E2E_PREBUILT": "host"}
    done = subprocess.run(
        [binary, "--gtest_filter=-Live.EgressAnAllowlistReachesItsHostAndNothingElse"],
        env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or "[  PASSED  ]" not in done.stdout:
        return f"exit {done.returncode}: {done.stdout.strip()[-3000:]}"
    if "SKIPPED" in done.stdout:
        return f"a live test skipped: {done.stdout.strip()[-1500:]}"
    if not any(e["ok"] and e["endpoint"] == "entra" for e in world.entries()):
        return "the live suite got no token from the stand-in Entra ID"
    return None


def http_status(method, url, headers=None, body=None):
    """One request through the system trust store and the namespace's hosts file."""
    import http.client
    import ssl
    import urllib.parse
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=10,
                                                 context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
    target = parts.path + ("?" + parts.query if parts.query else "")
    connection.request(method, target, body=body, headers=headers or {})
    status = connection.getresponse().status
    connection.close()
    return status


def client_assertion(world, audience, key="client.key", certificate="client.crt"):
    header = {"alg": "RS256", "typ": "JWT",
              "x5t": standins.certificate_thumbprint(os.path.join(world.work, certificate))}
    now = int(time.time())
    claims = {"aud": audience, "iss": CLIENT_ID, "sub": CLIENT_ID, "jti": "j1", "nbf": now,
              "exp": now + 600}
    signing_input = (standins.b64url(json.dumps(header).encode()) + "." +
                     standins.b64url(json.dumps(claims).encode()))
    signature = run_bytes(["openssl", "dgst", "-sha256", "-sign", os.path.join(world.work, key)],
                          signing_input.encode())
    return signing_input + "." + standins.b64url(signature)


def run_bytes(argv, stdin):
    return subprocess.run(argv, input=stdin, capture_output=True, check=True).stdout


def case_standins_refuse_anything_else(world):
    """Each stand-in answers the documented request and refuses it with any one thing changed."""
    import urllib.parse
    token_url = f"https://login.microsoftonline.com/{TENANT}/oauth2/v2.0/token"
    form_type = {"Content-Type": "application/x-www-form-urlencoded"}
    scope = "https://dynamicsessions.io/.default"

    def form(**fields):
        base = {"grant_type": "client_credentials", "client_id": CLIENT_ID, "scope": scope}
        base.update(fields)
        return urllib.parse.urlencode({k: v for k, v in base.items() if v is not None})

    assertion_type = standins.ASSERTION_TYPE
    good_assertion = client_assertion(world, token_url)
    entra = [
        ("the secret flow", "POST", token_url, form_type, form(client_secret=SECRET), 200),
        ("the certificate flow", "POST", token_url, form_type,
         form(client_assertion_type=assertion_type, client_assertion=good_assertion), 200),
        ("the v1 path", "POST", f"https://login.microsoftonline.com/{TENANT}/oauth2/token",
         form_type, form(client_secret=SECRET), 404),
        ("another tenant", "POST",
         "https://login.microsoftonline.com/common-tenant/oauth2/v2.0/token", form_type,
         form(client_secret=SECRET), 400),
        ("a GET", "GET", token_url, {}, None, 405),
        ("a JSON body", "POST", token_url, {"Content-Type": "application/json"},
         json.dumps({"client_secret": SECRET}), 400),
        ("another grant", "POST", token_url, form_type,
         form(grant_type="password", client_secret=SECRET), 400),
        ("a scope without .default", "POST", token_url, form_type,
         form(scope="https://dynamicsessions.io", client_secret=SECRET), 400),
        ("another client", "POST", token_url, form_type,
         form(client_id="someone-else", client_secret=SECRET), 400),
        ("a wrong secret", "POST", token_url, form_type, form(client_secret="wrong"), 401),
        ("no assertion type", "POST", token_url, form_type,
         form(client_assertion=good_assertion), 400),
        ("an assertion for another audience", "POST", token_url, form_type,
         form(client_assertion_type=assertion_type,
              client_assertion=client_assertion(world, "https://login.microsoftonline.com/x")),
         401),
        ("an assertion signed by another key", "POST", token_url, form_type,
         form(client_assertion_type=assertion_type,
              client_assertion=client_assertion(world, token_url, key="issuer.key")), 401),
        ("an assertion naming another certificate", "POST", token_url, form_type,
         form(client_assertion_type=assertion_type,
              client_assertion=client_assertion(world, token_url, certificate="ca.pem")), 401),
    ]
    imds = f"http://{IMDS_ADDRESS}/metadata/identity/oauth2/token"
    query = "?api-version=2018-02-01&resource=https%3A%2F%2Fdynamicsessions.io"
    metadata = {"Metadata": "true"}
    imds_requests = [
        ("the documented request", "GET", imds + query, metadata, None, 200),
        ("no Metadata header", "GET", imds + query, {}, None, 400),
        ("another api-version", "GET",
         imds + "?api-version=2019-11-01&resource=https%3A%2F%2Fdynamicsessions.io", metadata,
         None, 400),
        ("a scope for a resource", "GET",
         imds + "?api-version=2018-02-01&resource=https%3A%2F%2Fdynamicsessions.io%2F.default",
         metadata, None, 400),
        ("another path", "GET", f"http://{IMDS_ADDRESS}/metadata/identity/token" + query,
         metadata, None, 404),
        ("a proxied request", "GET", imds + query, {**metadata, "X-Forwarded-For": "10.0.0.1"},
         None, 400),
    ]
    app = f"http://localhost:{APP_SERVICE_PORT}/msi/token"
    app_query = "?api-version=2019-08-01&resource=https%3A%2F%2Fdynamicsessions.io"
    identity = {"X-IDENTITY-HEADER": IDENTITY_HEADER}
    app_requests = [
        ("the documented request", "GET", app + app_query, identity, None, 200),
        ("no X-IDENTITY-HEADER", "GET", app + app_query, {}, None, 401),
        ("the old secret header", "GET", app + app_query, {"secret": IDENTITY_HEADER}, None, 401),
        ("a wrong header value", "GET", app + app_query, {"X-IDENTITY-HEADER": "x"}, None, 401),
        ("the 2017 api-version", "GET",
         app + "?api-version=2017-09-01&resource=https%3A%2F%2Fdynamicsessions.io", identity,
         None, 400),
        ("another path", "GET", f"http://localhost:{APP_SERVICE_PORT}/token" + app_query,
         identity, None, 404),
    ]
    world.start_imds()
    wrong = []
    try:
        for what, method, url, headers, body, expected in entra + imds_requests + app_requests:
            got = http_status(method, url, headers, body)
            if got != expected:
                wrong.append(f"{what}: HTTP {got}, expected {expected}")
    finally:
        world.stop_imds()
    az = os.path.join(world.az_dir, "az")
    for what, argv, expected in [
            ("the documented call",
             ["account", "get-access-token", "--resource", "https://dynamicsessions.io", "-o",
              "json"], 0),
            ("table output",
             ["account", "get-access-token", "--resource", "https://dynamicsessions.io", "-o",
              "table"], 2),
            ("no resource", ["account", "get-access-token", "-o", "json"], 2),
            ("another command", ["account", "show", "-o", "json"], 2),
            ("an unknown flag",
             ["account", "get-access-token", "--resource", "https://dynamicsessions.io", "-o",
              "json", "--bogus", "x"], 2)]:
        got = subprocess.run([az, *argv], capture_output=True).returncode
        if got != expected:
            wrong.append(f"az {what}: exit {got}, expected {expected}")
    return "; ".join(wrong) if wrong else None


CASES = {
    "standins_refuse_anything_else": case_standins_refuse_anything_else,
    "client_secret": case_client_secret,
    "client_certificate": case_client_certificate,
    "workload_identity": case_workload_identity,
    "managed_identity_imds": case_imds,
    "managed_identity_app_service": case_app_service,
    "azure_cli": case_azure_cli,
    "wrong_scope_refused": case_wrong_scope,
    "expired_token_refused": case_expired_token,
    "tenant_mismatch_refused": case_tenant_mismatch,
    "emulator_header_refused": case_emulator_header_refused,
    "live_suite": case_live_suite,
}


def inside(maf_sandbox, emulator, names):
    work = tempfile.mkdtemp(prefix="maf-production-path-")
    failures = 0
    try:
        make_pki(work)
        enter_private_world(work)
        world = World(maf_sandbox, emulator, work)
        try:
            for name in names:
                started = time.monotonic()
                try:
                    why = CASES[name](world)
                except Exception as error:  # a case that crashed is a failed case
                    why = f"{type(error).__name__}: {error}"
                took = time.monotonic() - started
                print(f"{'PASS' if why is None else 'FAIL'} {name} ({took:.1f} s)"
                      + ("" if why is None else f": {why}"), flush=True)
                failures += why is not None
        finally:
            world.close()
        if failures:
            for log in ("service.log", "plain-emulator.log"):
                if os.path.exists(os.path.join(work, log)):
                    print(f"--- tail of {log}")
                    with open(os.path.join(work, log), encoding="utf-8") as f:
                        print("".join(f.readlines()[-30:]))
    finally:
        end_sandboxes_under(work)
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--inside":
        names = sys.argv[4:] or list(CASES)
        return inside(sys.argv[2], sys.argv[3], names)
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    unknown = [n for n in sys.argv[3:] if n not in CASES]
    if unknown:
        print(f"unknown cases {unknown}; known: {list(CASES)}", file=sys.stderr)
        return 2
    # A new network and mount namespace: both, and everything in them, end with this process.
    return subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", "--",
                           sys.executable, os.path.abspath(__file__), "--inside",
                           *sys.argv[1:]]).returncode


if __name__ == "__main__":
    sys.exit(main())
