"""Stand-ins for the identity endpoints a production host reaches, at their real default addresses.

Each one checks a request the way its documentation describes it and refuses anything else, so a
client that changed an address, a path, an api-version, a header or a form field fails a test:

- Entra ID's token endpoint (login.microsoftonline.com, HTTPS): POST /{tenant}/oauth2/v2.0/token,
  form-encoded, grant_type=client_credentials, a `.default` scope, and one of a client secret, a
  client assertion (RS256, its x5t the SHA-1 thumbprint of the registered certificate, aud the
  token endpoint, iss = sub = the client id) or the federated token the test projected;
- the instance metadata service (http://169.254.169.254): GET /metadata/identity/oauth2/token with
  `Metadata: true`, api-version 2018-02-01 and a resource, and no X-Forwarded-For;
- the App Service / Container Apps identity endpoint (IDENTITY_ENDPOINT): GET with api-version
  2019-08-01, a resource and X-IDENTITY-HEADER equal to IDENTITY_HEADER;
- `az account get-access-token` (az_main, called by the fake `az` the test puts on PATH).

Every token they issue is an RS256 JWT signed by the test's issuer key, for the resource asked
(`aud`), in the configured tenant: what the impersonating service verifies. Only the standard
library and the openssl command are used. Every verdict is appended as one JSON line to the
journal, so a test can tell which endpoint served it.
"""

import base64
import hashlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
IMDS_PATH = "/metadata/identity/oauth2/token"
IMDS_API_VERSION = "2018-02-01"
APP_SERVICE_API_VERSION = "2019-08-01"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Issuer:
    """Mints the access tokens every stand-in hands out, and can be told to mint wrong ones."""

    def __init__(self, key_path, tenant, misissue=None):
        self.key_path = key_path
        self.tenant = tenant
        self.misissue = misissue  # None, "audience", "tenant" or "expired"

    def mint(self, resource, subject):
        now = int(time.time())
        tenant = self.tenant
        audience = resource
        lifetime = 3600
        if self.misissue == "audience":
            audience = "https://management.azure.com"
        elif self.misissue == "tenant":
            tenant = "00000000-0000-0000-0000-00000000beef"
        elif self.misissue == "expired":
            now -= 7200
        header = {"alg": "RS256", "typ": "JWT", "kid": "standin"}
        claims = {
            "aud": audience,
            "iss": f"https://sts.windows.net/{tenant}/",
            "tid": tenant,
            "iat": now,
            "nbf": now,
            "exp": now + lifetime,
            "appid": subject,
            "oid": subject,
            "sub": subject,
        }
        signing_input = (b64url(json.dumps(header).encode()) + "." +
                         b64url(json.dumps(claims).encode()))
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", self.key_path],
            input=signing_input.encode(), capture_output=True, check=True).stdout
        return signing_input + "." + b64url(signature), now + lifetime


class Journal:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def write(self, **entry):
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")


def certificate_thumbprint(cert_path):
    der = subprocess.run(["openssl", "x509", "-in", cert_path, "-outform", "DER"],
                         capture_output=True, check=True).stdout
    return b64url(hashlib.sha1(der).digest())


def rs256_verifies(signing_input, signature, cert_path):
    with tempfile.TemporaryDirectory() as work:
        public = os.path.join(work, "public.pem")
        with open(public, "wb") as out:
            out.write(subprocess.run(["openssl", "x509", "-in", cert_path, "-pubkey", "-noout"],
                                     capture_output=True, check=True).stdout)
        sig = os.path.join(work, "signature")
        with open(sig, "wb") as out:
            out.write(signature)
        done = subprocess.run(["openssl", "dgst", "-sha256", "-verify", public, "-signature", sig],
                              input=signing_input.encode(), capture_output=True)
        return done.returncode == 0


class Refused(Exception):
    def __init__(self, status, error, why):
        super().__init__(why)
        self.status, self.error, self.why = status, error, why


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin"

    def log_message(self, *args):
        pass

    def answer(self, status, document):
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def serve(self, method):
        name = self.server.endpoint_name
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            document, detail = self.server.check(self, method, body)
            self.server.journal.write(endpoint=name, ok=True, **detail)
            self.answer(200, document)
        except Refused as refusal:
            self.server.journal.write(endpoint=name, ok=False, why=refusal.why)
            self.answer(refusal.status,
                        {"error": refusal.error, "error_description": refusal.why})

    def do_GET(self):
        self.serve("GET")

    def do_POST(self):
        self.serve("POST")

    def do_PUT(self):
        self.serve("PUT")


def split_target(handler):
    parsed = urllib.parse.urlsplit(handler.path)
    query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
    for key, values in query.items():
        if len(values) != 1:
            raise Refused(400, "invalid_request", f"query parameter {key} given twice")
    return parsed.path, {k: v[0] for k, v in query.items()}


class EntraServer(ThreadingHTTPServer):
    """login.microsoftonline.com's v2.0 token endpoint for one tenant and one application."""

    endpoint_name = "entra"
    daemon_threads = True

    def __init__(self, address, issuer, journal, *, client_id, secret, certificate,
                 federated_token):
        super().__init__(address, Handler)
        self.issuer, self.journal = issuer, journal
        self.client_id, self.secret = client_id, secret
        self.certificate = certificate
        self.thumbprint = certificate_thumbprint(certificate)
        self.federated_token = federated_token
        self.token_url = f"https://login.microsoftonline.com/{issuer.tenant}/oauth2/v2.0/token"

    def check(self, handler, method, body):
        path, query = split_target(handler)
        if handler.headers.get("Host", "").split(":")[0] != "login.microsoftonline.com":
            raise Refused(400, "invalid_request", "the Host is not login.microsoftonline.com")
        parts = path.split("/")
        if len(parts) != 5 or parts[0] != "" or parts[2:] != ["oauth2", "v2.0", "token"]:
            raise Refused(404, "invalid_request", f"no token endpoint at {path}")
        if parts[1] != self.issuer.tenant:
            raise Refused(400, "invalid_tenant", "AADSTS90002: tenant not found")
        if method != "POST" or query:
            raise Refused(405, "invalid_request", "the token endpoint takes a form POST only")
        if handler.headers.get("Content-Type", "").split(";")[0].strip() != \
                "application/x-www-form-urlencoded":
            raise Refused(400, "invalid_request", "the body must be form-encoded")
        form = urllib.parse.parse_qs(body.decode(), keep_blank_values=True, strict_parsing=True)
        if any(len(v) != 1 for v in form.values()):
            raise Refused(400, "invalid_request", "a form field is given twice")
        form = {k: v[0] for k, v in form.items()}
        if form.get("grant_type") != "client_credentials":
            raise Refused(400, "unsupported_grant_type", "grant_type must be client_credentials")
        if form.get("client_id") != self.client_id:
            raise Refused(400, "unauthorized_client", "AADSTS700016: unknown application")
        scope = form.get("scope", "")
        if " " in scope or not scope.endswith("/.default") or len(scope) <= len("/.default"):
            raise Refused(400, "invalid_scope", "the client credentials flow takes one .default scope")
        allowed = {"grant_type", "client_id", "scope", "client_secret", "client_assertion",
                   "client_assertion_type"}
        if set(form) - allowed:
            raise Refused(400, "invalid_request", f"unknown fields {sorted(set(form) - allowed)}")
        if "client_secret" in form:
            if "client_assertion" in form or "client_assertion_type" in form:
                raise Refused(400, "invalid_request", "a secret and an assertion together")
            if form["client_secret"] != self.secret:
                raise Refused(401, "invalid_client", "AADSTS7000215: invalid client secret")
            flow = "client_secret"
        else:
            if form.get("client_assertion_type") != ASSERTION_TYPE:
                raise Refused(400, "invalid_request", "client_assertion_type is not jwt-bearer")
            flow = self.check_assertion(form.get("client_assertion", ""))
        token, expires = self.issuer.mint(scope[: -len("/.default")], self.client_id)
        answer = {"token_type": "Bearer", "expires_in": expires - int(time.time()),
                  "ext_expires_in": expires - int(time.time()), "access_token": token}
        return answer, {"flow": flow, "token": token}

    def check_assertion(self, assertion):
        if assertion == self.federated_token:
            return "workload_identity"
        pieces = assertion.split(".")
        if len(pieces) != 3:
            raise Refused(400, "invalid_client", "AADSTS50027: the assertion is not a JWT")
        try:
            header = json.loads(b64url_decode(pieces[0]))
            claims = json.loads(b64url_decode(pieces[1]))
            signature = b64url_decode(pieces[2])
        except ValueError as bad:
            raise Refused(400, "invalid_client", "AADSTS50027: malformed assertion") from bad
        if header.get("alg") != "RS256" or header.get("typ") != "JWT":
            raise Refused(400, "invalid_client", "the assertion must be an RS256 JWT")
        if header.get("x5t") != self.thumbprint:
            raise Refused(401, "invalid_client",
                          "AADSTS700027: the x5t thumbprint names no registered certificate")
        if not rs256_verifies(pieces[0] + "." + pieces[1], signature, self.certificate):
            raise Refused(401, "invalid_client", "AADSTS700027: the signature does not verify")
        now = int(time.time())
        if claims.get("aud") != self.token_url:
            raise Refused(401, "invalid_client", "AADSTS700016: the assertion's aud is wrong")
        if claims.get("iss") != self.client_id or claims.get("sub") != self.client_id:
            raise Refused(401, "invalid_client", "the assertion's iss and sub must be the client")
        if not claims.get("jti"):
            raise Refused(401, "invalid_client", "the assertion has no jti")
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
            raise Refused(401, "invalid_client", "AADSTS700024: the assertion has expired")
        if not isinstance(claims.get("nbf"), int) or claims["nbf"] > now + 60:
            raise Refused(401, "invalid_client", "the assertion is not valid yet")
        return "client_certificate"


class ImdsServer(ThreadingHTTPServer):
    """The instance metadata service's managed-identity token route."""

    endpoint_name = "imds"
    daemon_threads = True

    def __init__(self, address, issuer, journal):
        super().__init__(address, Handler)
        self.issuer, self.journal = issuer, journal

    def check(self, handler, method, body):
        path, query = split_target(handler)
        if handler.headers.get("X-Forwarded-For") is not None:
            raise Refused(400, "invalid_request", "IMDS refuses requests through a proxy")
        if path != IMDS_PATH:
            raise Refused(404, "not_found", f"no IMDS route {path}")
        if handler.headers.get("Metadata") != "true":
            raise Refused(400, "invalid_request", "Required metadata header not specified")
        if method != "GET" or body:
            raise Refused(405, "invalid_request", "IMDS tokens are a GET")
        if query.get("api-version") != IMDS_API_VERSION:
            raise Refused(400, "invalid_request", "missing or unsupported api-version")
        resource = query.get("resource")
        if not resource or resource.endswith("/.default"):
            raise Refused(400, "invalid_resource", "resource must name the resource, not a scope")
        if set(query) - {"api-version", "resource", "client_id"}:
            raise Refused(400, "invalid_request", "unknown query parameter")
        token, expires = self.issuer.mint(resource, "imds-identity")
        now = int(time.time())
        # IMDS answers its numbers as strings.
        return ({"access_token": token, "refresh_token": "", "expires_in": str(expires - now),
                 "expires_on": str(expires), "ext_expires_in": str(expires - now),
                 "not_before": str(now), "resource": resource, "token_type": "Bearer"},
                {"token": token})


class AppServiceServer(ThreadingHTTPServer):
    """The App Service / Container Apps local identity endpoint behind IDENTITY_ENDPOINT."""

    endpoint_name = "app_service"
    daemon_threads = True

    def __init__(self, address, issuer, journal, *, path, header):
        super().__init__(address, Handler)
        self.issuer, self.journal = issuer, journal
        self.path, self.header = path, header

    def check(self, handler, method, body):
        path, query = split_target(handler)
        if path != self.path:
            raise Refused(404, "not_found", f"no identity route {path}")
        if handler.headers.get("X-IDENTITY-HEADER") != self.header:
            raise Refused(401, "unauthorized", "X-IDENTITY-HEADER is missing or wrong")
        if method != "GET" or body:
            raise Refused(405, "invalid_request", "identity tokens are a GET")
        if query.get("api-version") != APP_SERVICE_API_VERSION:
            raise Refused(400, "invalid_request", "missing or unsupported api-version")
        resource = query.get("resource")
        if not resource or resource.endswith("/.default"):
            raise Refused(400, "invalid_resource", "resource must name the resource, not a scope")
        if set(query) - {"api-version", "resource", "client_id", "principal_id", "mi_res_id"}:
            raise Refused(400, "invalid_request", "unknown query parameter")
        token, expires = self.issuer.mint(resource, "app-service-identity")
        return ({"access_token": token, "expires_on": str(expires), "resource": resource,
                 "token_type": "Bearer", "client_id": "app-service-identity"},
                {"token": token})


def serve_forever(server, tls=None):
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


def az_main(config_path, argv):
    """The fake `az`: `account get-access-token` as Azure CLI 2.x takes and prints it."""
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    journal = Journal(config["journal"])
    issuer = Issuer(config["issuer_key"], config["tenant"], config.get("misissue"))

    def refuse(why):
        journal.write(endpoint="az", ok=False, why=why)
        print(f"ERROR: {why}", file=sys.stderr)
        return 2

    if argv[:2] != ["account", "get-access-token"]:
        return refuse(f"the fake az serves `account get-access-token` only, not {argv[:2]}")
    options, rest = {}, argv[2:]
    known = {"--resource": "resource", "--scope": "scope", "--tenant": "tenant", "-t": "tenant",
             "--output": "output", "-o": "output", "--subscription": "subscription"}
    while rest:
        flag = rest.pop(0)
        if flag not in known or not rest:
            return refuse(f"unrecognized arguments: {flag}")
        options[known[flag]] = rest.pop(0)
    if options.get("output") != "json":
        return refuse("the caller must ask for -o json to parse the answer")
    if ("resource" in options) == ("scope" in options):
        return refuse("give exactly one of --resource or --scope")
    resource = options.get("resource") or options["scope"][: -len("/.default")]
    token, expires = issuer.mint(resource, "az-user")
    journal.write(endpoint="az", ok=True, token=token)
    print(json.dumps({
        "accessToken": token,
        "expiresOn": time.strftime("%Y-%m-%d %H:%M:%S.000000", time.localtime(expires)),
        "expires_on": expires,
        "subscription": "00000000-0000-0000-0000-0000000000aa",
        "tenant": config["tenant"],
        "tokenType": "Bearer",
    }, indent=2))
    return 0
