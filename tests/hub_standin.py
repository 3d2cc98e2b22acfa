"""A local stand-in for the Hugging Face Hub HTTP API, on loopback, for push tests without a network.

It implements the endpoints `huggingface_hub` 2.x calls for `HfApi.create_repo` and
`HfApi.upload_folder` (read from its source: `hf_api.py`, `_commit_api.py`, `_upload_pipeline.py`):

- `POST /api/repos/create`                          create a repo (409 when it exists)
- `POST /api/validate-yaml`                         README metadata check (accepts valid YAML)
- `GET  /api/{type}s/{ns}/{name}`                   repo info: id, private, sha
- `GET  /api/{type}s/{ns}/{name}/tree/{rev}`        list files (for `delete_patterns`)
- `POST /api/{type}s/{ns}/{name}/preupload/{rev}`   upload mode per file: always "regular", so the
                                                    client sends content inline in the commit
                                                    (LFS / Xet transfer is not exercised)
- `POST /api/{type}s/{ns}/{name}/commit/{rev}`      NDJSON commit: files (base64), deletions

Every request must carry `Authorization: Bearer <token>` with the token the stand-in was given;
files land under `root/<type>s/<ns>/<name>/`, so a test can load them back.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

REPO_PATH = re.compile(r"^/api/(?P<type>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)/(?P<op>\w+)/")
REPO_INFO_PATH = re.compile(r"^/api/(?P<type>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)$")


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    commits: list[dict] = field(default_factory=list)


class HubStandIn:
    """Start with `with HubStandIn(tmp_path, token="hf_x") as hub:`; `hub.endpoint` is the URL."""

    def __init__(self, root: Path, token: str) -> None:
        self.root = Path(root)
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def files_of(self, repo_id: str, repo_type: str = "dataset") -> Path:
        return self.root / f"{repo_type}s" / repo_id

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def _dispatch(self, method: str) -> None:
                url = urlparse(self.path)
                hub.requests.append((method, url.path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    return self._reply(401, {"error": "Invalid credentials in Authorization header"})
                if method == "POST" and url.path == "/api/repos/create":
                    return self._create(json.loads(body))
                if method == "POST" and url.path == "/api/validate-yaml":
                    return self._validate_yaml(json.loads(body))
                match = REPO_PATH.match(url.path + "/") or REPO_INFO_PATH.match(url.path)
                if not match:
                    return self._reply(404, {"error": f"stand-in: no route for {method} {url.path}"})
                repo_type = match["type"][:-1]
                repo_id = f"{match['ns']}/{match['name']}"
                repo = hub.repos.get(f"{repo_type}:{repo_id}")
                if repo is None:
                    return self._reply(
                        404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
                    )
                op = match.groupdict().get("op")
                if method == "GET" and op is None:
                    last = repo.commits[-1]["oid"] if repo.commits else None
                    return self._reply(200, {"id": repo.repo_id, "private": repo.private, "sha": last})
                if method == "POST" and op == "preupload":
                    files = json.loads(body)["files"]
                    return self._reply(
                        200,
                        {
                            "files": [
                                {
                                    "path": f["path"],
                                    "uploadMode": "regular",
                                    "shouldIgnore": False,
                                    "oid": None,
                                }
                                for f in files
                            ]
                        },
                    )
                if method == "GET" and op == "tree":
                    return self._tree(repo)
                if method == "POST" and op == "commit":
                    return self._commit(repo, body)
                return self._reply(404, {"error": f"stand-in: no route for {method} {url.path}"})

            def _create(self, payload: dict) -> None:
                repo_type = payload.get("type") or "model"
                repo_id = (
                    f"{payload['organization']}/{payload['name']}"
                    if payload.get("organization")
                    else (payload["name"])
                )
                key = f"{repo_type}:{repo_id}"
                prefix = "" if repo_type == "model" else f"{repo_type}s/"
                url = f"{hub.endpoint}/{prefix}{repo_id}"
                if key in hub.repos:  # the Hub answers 409 with the existing repo's url
                    return self._reply(
                        409, {"error": f"You already created this {repo_type} repo", "url": url}
                    )
                hub.repos[key] = Repo(repo_type, repo_id, private=payload.get("visibility") == "private")
                hub.files_of(repo_id, repo_type).mkdir(parents=True, exist_ok=True)
                self._reply(200, {"url": url})

            def _validate_yaml(self, payload: dict) -> None:
                content = payload.get("content", "")
                match = re.match(r"^---\n(.*?)\n---", content, re.DOTALL)
                try:
                    metadata = yaml.safe_load(match.group(1)) if match else None
                except yaml.YAMLError as exc:
                    return self._reply(400, {"errors": [{"message": f"invalid YAML: {exc}"}]})
                if match and not isinstance(metadata, dict):
                    return self._reply(400, {"errors": [{"message": "metadata must be a mapping"}]})
                self._reply(200, {"errors": [], "warnings": []})

            def _tree(self, repo: Repo) -> None:
                base = hub.files_of(repo.repo_id, repo.repo_type)
                entries = [
                    {
                        "type": "file",
                        "path": path.relative_to(base).as_posix(),
                        "size": path.stat().st_size,
                        "oid": hashlib.sha1(path.read_bytes()).hexdigest(),
                    }
                    for path in sorted(base.rglob("*"))
                    if path.is_file()
                ]
                self._reply(200, entries)

            def _commit(self, repo: Repo, body: bytes) -> None:
                base = hub.files_of(repo.repo_id, repo.repo_type)
                lines = [json.loads(line) for line in body.splitlines() if line.strip()]
                header = lines[0]
                if header.get("key") != "header":
                    return self._reply(400, {"error": "first NDJSON line must be the header"})
                oid = hashlib.sha1(body).hexdigest()
                changed = []
                for line in lines[1:]:
                    value = line["value"]
                    target = base / unquote(value["path"])
                    if line["key"] == "file":
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(base64.b64decode(value["content"]))
                    elif line["key"] == "deletedFile":
                        target.unlink(missing_ok=True)
                    else:
                        return self._reply(400, {"error": f"stand-in: unsupported operation {line['key']}"})
                    changed.append((line["key"], value["path"]))
                repo.commits.append(
                    {"oid": oid, "summary": header["value"]["summary"], "operations": changed}
                )
                prefix = "" if repo.repo_type == "model" else f"{repo.repo_type}s/"
                self._reply(
                    200,
                    {"commitUrl": f"{hub.endpoint}/{prefix}{repo.repo_id}/commit/{oid}", "commitOid": oid},
                )

            def _reply(self, status: int, payload, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
