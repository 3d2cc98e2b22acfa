"""Publishing an export folder to the Hugging Face Hub, private unless asked otherwise.

Through `huggingface_hub.HfApi`: `create_repo(repo_type="dataset", private=...)`, and where the repo
exists already (409) `dataset_info` for its visibility; then one `upload_folder` of the folder (parquet
shards, OpenAI files, README.md card, manifest) that also deletes the files of the folder's configs
that the folder no longer has, so a re-export with fewer shards leaves no stale shard behind.

The endpoint is `HF_ENDPOINT` read when pushing (default https://huggingface.co); the token is
`--token`, else `HF_TOKEN`, else the one `hf auth login` saved.

>>> push_folder(Path("data"), "my-org/agent-traces")           # doctest: +SKIP
PushResult(url='https://huggingface.co/datasets/my-org/agent-traces', private=True, ...)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi, constants, get_token
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import filter_repo_objects

from traceforge import __version__
from traceforge.export.card import MANIFEST
from traceforge.export.folder import finish_journals, read_manifest, writing

# What is not published: paths with a part that starts with a dot (`.traceforge-partial/`, an
# interrupted export's files; editor and system files), as fnmatch patterns over the whole path.
HIDDEN = [".*", "*/.*"]


class HubError(Exception):
    """A push that could not be made, with what to do."""


@dataclass
class PushResult:
    url: str  # the dataset's page
    commit_url: str
    private: bool  # the repo's visibility after the push
    created: bool  # False: the repo existed before
    files: list[str]  # paths in the repo that were uploaded


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def push_folder(
    folder: Path,
    repo_id: str,
    *,
    private: bool = True,
    token: str | None = None,
    commit_message: str | None = None,
    allow_unredacted: bool = False,
) -> PushResult:
    """Push an export folder as the dataset `repo_id`; raise HubError with what to do on failure.

    A repo that already exists keeps its visibility; pushing private data into an existing public
    repo is refused unless `private` is False. A config exported with `--no-redact` is refused unless
    `allow_unredacted`: saying it once at export time is not saying it for the Hub.
    """
    if not folder.is_dir():
        raise HubError(
            f"{folder} is not a folder; write an export with `traceforge export sft --out {folder}`"
        )
    with writing(folder):  # no export changes the files while they are sent
        finish_journals(folder)  # an export killed while putting its files in place: send what it meant
        return _push(folder, repo_id, private, token, commit_message, allow_unredacted)


def _push(
    folder: Path,
    repo_id: str,
    private: bool,
    token: str | None,
    commit_message: str | None,
    allow_unredacted: bool,
) -> PushResult:
    manifest = read_manifest(folder)
    configs = [c for c, entry in manifest["configs"].items() if entry.get("files")]
    if not (folder / MANIFEST).exists() or not configs:
        raise HubError(
            f"{folder} holds no traceforge export with rows; "
            f"write one with `traceforge export sft --out {folder}`"
        )
    unredacted = [
        c for c in configs if not (manifest["configs"][c].get("redaction") or {}).get("enabled", False)
    ]
    if unredacted and not allow_unredacted:
        raise HubError(
            f"{', '.join(unredacted)} in {folder} was exported with --no-redact: secrets and personal "
            "data in the traces would be published. Export again without --no-redact, or pass "
            "--allow-unredacted if you have checked the data."
        )
    token = token or get_token()
    if not token:
        raise HubError(
            "no Hugging Face token: pass --token, set HF_TOKEN, or run `hf auth login` "
            "(the token needs write access)"
        )
    api = HfApi(endpoint=endpoint(), token=token, library_name="traceforge", library_version=__version__)
    files = sorted(  # what upload_folder sends, filtered as it filters
        filter_repo_objects(
            (path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()),
            ignore_patterns=HIDDEN,
        )
    )
    try:
        created = _create(api, repo_id, private)
        is_private = private if created else bool(api.dataset_info(repo_id).private)
        if private and not is_private:
            raise HubError(
                f"{repo_id} already exists and is public: pushing would publish this data. "
                "Pass --public to push to it anyway, or choose another repo id."
            )
        commit = api.upload_folder(
            repo_id=repo_id,
            repo_type="dataset",
            folder_path=folder,
            commit_message=commit_message or f"traceforge {__version__}: {', '.join(configs)}",
            delete_patterns=[f"{config}/*" for config in manifest["configs"]],
            ignore_patterns=HIDDEN,
        )
    except HfHubHTTPError as exc:
        raise HubError(_http_message(exc, repo_id)) from exc
    except Exception as exc:
        if _unreachable(exc):
            raise HubError(
                f"cannot reach the Hugging Face Hub at {api.endpoint}: {exc}. "
                "Check the network (or HF_ENDPOINT) and push again with `traceforge push`."
            ) from exc
        raise
    return PushResult(
        url=f"{api.endpoint}/datasets/{repo_id}",
        commit_url=commit.commit_url,
        private=is_private,
        created=created,
        files=files,
    )


def _create(api: HfApi, repo_id: str, private: bool) -> bool:
    """Create the dataset repo; False when it already existed (the Hub answers 409)."""
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private)
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code == 409:
            return False
        raise
    return True


def _http_message(exc: HfHubHTTPError, repo_id: str) -> str:
    status = exc.response.status_code if exc.response is not None else None
    if status == 401:
        return "the Hub refused the token (401): check it is valid, or log in again with `hf auth login`"
    if status == 403:
        return f"the token may not write to {repo_id} (403): use a token with write access to that namespace"
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"the Hub refused the push of {repo_id}: {first_line}"


def _unreachable(exc: BaseException) -> bool:
    """A connection failure, whichever HTTP client this huggingface_hub uses (httpx, httpx2)."""
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    return any(cls.__name__ in ("TransportError", "ConnectionError") for cls in type(exc).__mro__)
