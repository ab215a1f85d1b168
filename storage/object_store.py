"""The object store behind ``s3://`` tables and checkpoints: its settings in the form every client reads.

delta-rs, obstore (the files lakestream keeps beside a table) and the Python workers all read the
standard AWS variables, so ``[storage]`` is exported into the process environment once at start
(:func:`export_settings`), and the same keys travel with a job's table specs (:func:`delta_options`).
Credentials are never copied anywhere: they stay in the AWS variables or the host's role, so no
log, commit, manifest or checkpoint can hold them (DESIGN.md section 15).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, MutableMapping
from typing import Any

import obstore
from obstore.store import ObjectStore, from_url

from lakestream.config import StorageConfig
from lakestream.errors import LakestreamError
from storage.delta_log import is_local_uri

#: What delta-rs and obstore need for commits that cannot overwrite each other: ``PUT`` with
#: ``If-None-Match: *`` (S3 and every current S3-compatible server honour it).
CONDITIONAL_PUT = "etag"

#: Variables that hold secrets: never printed, logged or written anywhere by lakestream.
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class ObjectStoreError(LakestreamError, RuntimeError):
    """The object store refused or could not be reached; the message names the store and the fix."""


class NoConditionalWritesError(ObjectStoreError):
    """The store accepted a second ``PUT If-None-Match: *`` of one object: commits would overwrite."""


def is_object_store(uri: str) -> bool:
    """True for ``s3://`` and any other URI that is not a local path or ``file://``."""
    return not is_local_uri(uri)


def delta_options(settings: StorageConfig) -> dict[str, str]:
    """The delta-rs / object_store options of ``[storage]``: where the store is, never who we are."""
    out: dict[str, str] = {"AWS_CONDITIONAL_PUT": CONDITIONAL_PUT}
    if settings.endpoint.strip():
        out["AWS_ENDPOINT_URL"] = settings.endpoint.strip()
    if settings.region.strip():
        out["AWS_REGION"] = settings.region.strip()
    if settings.path_style:
        out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    if settings.allow_http:
        out["AWS_ALLOW_HTTP"] = "true"
    return out


#: The variables that say where the store is and how to talk to it (never who we are).
SETTING_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
    "AWS_ALLOW_HTTP",
    "AWS_CONDITIONAL_PUT",
)


def settings_from_environment() -> dict[str, str]:
    """The store's settings this process reads (``[storage]`` once exported), to travel with a job.

    A TaskManager's worker then reaches the same store with only its own credentials in its
    environment; credentials are not among them.
    """
    return {key: os.environ[key] for key in SETTING_VARIABLES if os.environ.get(key)}


def options_for(uri: str, given: Mapping[str, str] | None) -> dict[str, str] | None:
    """The storage options a job's client of ``uri`` carries: ``given``, else for an object store the
    settings of the building process (:func:`settings_from_environment`); None when there are none."""
    if given is not None:
        return dict(given) or None
    return (settings_from_environment() if is_object_store(uri) else {}) or None


def export_settings(settings: StorageConfig, environ: MutableMapping[str, str] | None = None) -> None:
    """Put ``[storage]`` into the environment every client of this process (and its children) reads.

    A configured key wins over the variable; an empty one leaves the variable as the user set it.
    """
    env = os.environ if environ is None else environ
    for key, value in delta_options(settings).items():
        if key == "AWS_CONDITIONAL_PUT":
            env.setdefault(key, value)
        else:
            env[key] = value


def open_store(uri: str, options: Mapping[str, str] | None = None) -> ObjectStore:
    """An obstore client rooted at ``uri`` (``s3://bucket/prefix``) with delta-rs style ``options``.

    The environment's AWS variables fill in what ``options`` leave out, as they do for delta-rs.
    """
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    for key, value in {**_environment_options(), **dict(options or {})}.items():
        name = key.lower()
        if name in ("aws_allow_http", "allow_http"):
            client["allow_http"] = value.strip().lower() in ("1", "true", "yes")
        elif name.startswith("aws_"):
            config[key.upper()] = value
    try:
        return from_url(uri, config=config or None, client_options=client or None)  # type: ignore[arg-type]
    except (ValueError, OSError) as exc:
        raise ObjectStoreError(
            f"cannot open the object store at {uri}: {exc}",
            fix="check lakehouse.root and the [storage] section (endpoint, region, path_style, allow_http)",
        ) from None


def _environment_options() -> dict[str, str]:
    """The AWS variables obstore does not read by itself (allow_http, conditional put)."""
    return {k: v for k, v in os.environ.items() if k in ("AWS_ALLOW_HTTP", "AWS_CONDITIONAL_PUT")}


def check_conditional_writes(store: ObjectStore, where: str, probe_dir: str = "_lakestream/probe") -> None:
    """Reach the store once and refuse one that lets a second conditional create of an object through.

    Commits and locks rely on ``PUT If-None-Match: *`` failing when the object exists; a store that
    ignores the header would let two writers overwrite each other's commit without a word. Being the
    first request of a writer, it also turns a wrong endpoint, key or bucket into a clear error.
    """
    path = f"{probe_dir}/{uuid.uuid4().hex}"
    try:
        obstore.put(store, path, b"probe", mode="create")
        try:
            obstore.put(store, path, b"probe", mode="create")
        except obstore.exceptions.AlreadyExistsError:
            return
        finally:
            obstore.delete(store, path)
    except (obstore.exceptions.BaseError, OSError) as exc:
        raise store_error(exc, where) from None
    raise NoConditionalWritesError(
        f"the object store at {where} accepted a second PUT with If-None-Match: * for one object, so two "
        "commits to one table could overwrite each other",
        fix="use a store that honours conditional writes (AWS S3, MinIO, S3Proxy 4 or later)",
    )


def store_error(exc: BaseException, where: str) -> ObjectStoreError:
    """``exc`` of a request to the store at ``where`` as an error that says what to fix."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    denied = obstore.exceptions.PermissionDeniedError | obstore.exceptions.UnauthenticatedError
    # A refused LIST comes back as a generic error carrying the status (S3 answers 403 to it).
    if isinstance(exc, denied) or "403 Forbidden" in str(exc):
        return ObjectStoreError(
            f"the object store at {where} refused the credentials: {text}",
            fix="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or the host's role) to "
            "credentials of this store",
        )
    if "NoSuchBucket" in str(exc):
        return ObjectStoreError(
            f"the bucket of {where} does not exist: {text}",
            fix="create the bucket (for the local server: lakestream s3 start --bucket NAME) or correct "
            "lakehouse.root / flink.checkpoint_dir",
        )
    if "error sending request" in str(exc) or "Connection refused" in str(exc):
        return ObjectStoreError(
            f"the object store of {where} cannot be reached: {text}",
            fix="start the store, or correct storage.endpoint (or AWS_ENDPOINT_URL)",
        )
    return ObjectStoreError(f"the object store at {where} failed: {text}")
