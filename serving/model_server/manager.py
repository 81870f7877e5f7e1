"""Which versions of which models are loaded, as TF Serving's ServerCore manages them.

For every model of the ModelServerConfig the manager polls `base_path` every
`file_system_poll_wait_seconds`: children whose names are non-negative int64
numbers (`00007` is version 7, loaded from `00007`; a name out of int64's range is
not a version, as TF Serving's `safe_strto64` rejects it) and that hold a SavedModel
proto are versions; the model's version policy
(`latest` N, `all`, `specific`) picks the aspired ones. Aspired versions are
loaded, warmed up and then made available; versions that are no longer aspired
are unloaded only once an aspired version is available (TF Serving's
AvailabilityPreservingPolicy), and an unload waits for the requests still using
the version. A version that fails to load is retried `max_num_load_retries`
times, `load_retry_interval_seconds` apart, while the older version keeps
serving.

Request threads borrow a version with `ServableManager.servable(model_spec)`,
which resolves the ModelSpec exactly as TF Serving does (`Latest(name)`,
`Specific(name, version)`, version labels) and counts the borrow so an unload
can wait for it.
"""

import contextlib
import dataclasses
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import grpc
import tensorflow as tf
from tensorflow_serving.apis import get_model_status_pb2, model_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving.model_server import config as config_lib
from serving.model_server import errors
from serving.model_server.servable import (
    Servable,
    is_complete_version_dir,
    load_servable,
    release_memory_to_system,
)

logger = logging.getLogger("serving.manager")

_State = get_model_status_pb2.ModelVersionStatus.State
START, LOADING, AVAILABLE, UNLOADING, END = (
    _State.Value("START"),
    _State.Value("LOADING"),
    _State.Value("AVAILABLE"),
    _State.Value("UNLOADING"),
    _State.Value("END"),
)


@dataclasses.dataclass(frozen=True)
class ManagerOptions:
    """Version-management settings (the matching tensorflow_model_server flags).

    Attributes:
        file_system_poll_wait_seconds: seconds between polls of the base paths;
            <= 0 polls once, at startup.
        max_num_load_retries: retries after a failed load before giving up.
        load_retry_interval_seconds: wait between load retries.
        saved_model_tags: MetaGraphDef tag set to load.
        allow_version_labels_for_unavailable_models: accept labels that point at
            versions that are not loaded.
    """

    file_system_poll_wait_seconds: float = 1.0
    max_num_load_retries: int = 5
    load_retry_interval_seconds: float = 60.0
    saved_model_tags: Sequence[str] = ("serve",)
    allow_version_labels_for_unavailable_models: bool = False


@dataclasses.dataclass(frozen=True)
class VersionStatus:
    """One row of GetModelStatus: a version, its state and its last error."""

    version: int
    state: int
    error: errors.ServingError | None = None


@dataclasses.dataclass
class _Version:
    version: int
    state: int = START
    error: errors.ServingError | None = None
    servable: Servable | None = None
    # The base path's child it is loaded from ("00007" for version 7).
    dirname: str = ""
    in_flight: int = 0
    failed_loads: int = 0
    next_load_time: float = 0.0


@dataclasses.dataclass
class _Model:
    config: model_server_config_pb2.ModelConfig | None  # None once removed from the config.
    versions: dict[int, _Version] = dataclasses.field(default_factory=dict)
    # The labels requests resolve: replaced only by a config whose labels all passed the
    # availability check, as TF Serving swaps its label map only after a successful reload.
    version_labels: dict[str, int] = dataclasses.field(default_factory=dict)
    # Last base-path problem logged, so each poll does not repeat it.
    last_scan_problem: str | None = None
    # Duplicate version directories warned about, likewise.
    warned_duplicates: set[str] = dataclasses.field(default_factory=set)


def servable_id(name: str, version: int) -> str:
    """TF Serving's ServableId::DebugString()."""
    return f"{{name: {name} version: {version}}}"


# Versions are int64s (ServableId::version): TF Serving ignores a name beyond this.
MAX_VERSION = 2**63 - 1


def _version_from_dirname(name: str) -> int | None:
    if not (name.isascii() and name.isdigit()):
        return None
    version = int(name)
    return version if version <= MAX_VERSION else None


def versions_by_dirname(children: Sequence[str]) -> tuple[dict[int, str], list[str]]:
    """Indexes a base path's children by version, as TF Serving's IndexChildrenByVersion.

    Returns:
        `{version: child it is loaded from}` (names that are not int64 versions are
        skipped; of two names of one version, `7` and `007`, the last in sorted order
        wins) and the warnings, TF Serving's, naming each name ignored as a duplicate.
    """
    found: dict[int, str] = {}
    warnings = []
    for child in sorted(children):
        version = _version_from_dirname(child)
        if version is None:
            continue
        if version in found:
            warnings.append(
                f"Duplicate version directories detected. Version {version} will be loaded "
                f"from {child}, {found[version]} will be ignored."
            )
        found[version] = child
    return found, warnings


def _error_from_exception(error: BaseException) -> errors.ServingError:
    if isinstance(error, errors.ServingError):
        return error
    if isinstance(error, tf.errors.OpError):
        return errors.ServingError(errors.code_from_number(error.error_code), error.message)
    if isinstance(error, (FileNotFoundError, NotADirectoryError)):
        return errors.not_found(str(error))
    if isinstance(error, PermissionError):
        return errors.ServingError(grpc.StatusCode.PERMISSION_DENIED, str(error))
    return errors.ServingError(grpc.StatusCode.UNKNOWN, f"{type(error).__name__}: {error}")


class ServableManager:
    """Loads, serves and unloads model versions.

    Args:
        options: ManagerOptions.
        load_fn: `(model_name, version, export_dir, tags) -> Servable`.
        warmup_fn: called with each freshly loaded Servable before it is made
            available; raising fails the load (as a failed TF Serving warmup does).
        on_availability_change: called with True when every configured model has
            an available version, False otherwise (drives the health service).
    """

    def __init__(
        self,
        options: ManagerOptions = ManagerOptions(),
        load_fn: Callable[..., Servable] = load_servable,
        warmup_fn: Callable[[Servable], None] | None = None,
        on_availability_change: Callable[[bool], None] | None = None,
    ):
        self._options = options
        self._load_fn = load_fn
        self._warmup_fn = warmup_fn
        self._on_availability_change = on_availability_change
        self._lock = threading.Condition()
        self._models: dict[str, _Model] = {}
        # Serializes polls: the poll thread and config reloads both load and unload.
        self._poll_mutex = threading.Lock()
        self._stop = threading.Event()
        self._poll_thread: threading.Thread | None = None
        self._all_available: bool | None = None

    # ------------------------------------------------------------------ config

    def set_config(self, config: model_server_config_pb2.ModelServerConfig) -> None:
        """Applies a ModelServerConfig and loads its aspired versions before returning.

        Models missing from `config` are unloaded (their versions stay listed in
        GetModelStatus as END). The new version labels take effect only when every
        label passes the availability check; otherwise the previous labels stay.

        Raises:
            ConfigError: the config is invalid (nothing changes).
            ServingError: FAILED_PRECONDITION when a version label points at a
                version that is not available (unless allowed by the options);
                the models are loaded as configured, the labels are not changed.
        """
        config_lib.validate_model_server_config(config)
        with self._poll_mutex:
            logger.info("Adding/updating models.")
            new_models = {model.name: model for model in config.model_config_list.config}
            with self._lock:
                for name, model_config in new_models.items():
                    logger.info("(Re-)adding model: %s", name)
                    model = self._models.setdefault(name, _Model(config=None))
                    model.config = model_config
                removed = [
                    (name, model)
                    for name, model in self._models.items()
                    if name not in new_models and model.config is not None
                ]
                for _, model in removed:
                    model.config = None
                    model.version_labels = {}
            for name, model in removed:
                logger.info("Removing model: %s", name)
                self._end_versions(name, model, keep=set())
            self._poll_all()
            self._install_version_labels(new_models)

    def _install_version_labels(
        self, model_configs: dict[str, model_server_config_pb2.ModelConfig]
    ) -> None:
        """Checks every model's labels, then installs them all (or none, on a failure)."""
        with self._lock:
            if not self._options.allow_version_labels_for_unavailable_models:
                for name, model_config in model_configs.items():
                    versions = self._models[name].versions
                    for version in model_config.version_labels.values():
                        record = versions.get(version)
                        if record is None or record.state != AVAILABLE:
                            raise errors.failed_precondition(
                                f"Request to assign label to version {version} of model {name}, "
                                "which is not currently available for inference"
                            )
            for name, model_config in model_configs.items():
                self._models[name].version_labels = dict(model_config.version_labels)

    # ----------------------------------------------------------------- polling

    def start_polling(self) -> None:
        """Starts the thread that re-scans the base paths every poll interval."""
        if self._options.file_system_poll_wait_seconds <= 0 or self._poll_thread is not None:
            return
        self._poll_thread = threading.Thread(target=self._poll_loop, name="fs_poll", daemon=True)
        self._poll_thread.start()

    def _poll_loop(self) -> None:
        while not self._stop.wait(self._options.file_system_poll_wait_seconds):
            try:
                with self._poll_mutex:
                    self._poll_all()
            except Exception:  # A poll must never kill the thread.
                logger.exception("File system poll failed")

    def _poll_all(self) -> None:
        with self._lock:
            models = [
                (name, model) for name, model in self._models.items() if model.config is not None
            ]
        for name, model in models:
            if self._stop.is_set():
                return
            self._poll_model(name, model)
        self._report_availability()

    def _log_scan_problem_once(self, model: _Model, problem: str | None, log) -> None:
        if problem is not None and problem != model.last_scan_problem:
            log(problem)
        model.last_scan_problem = problem

    def _aspired_versions(self, name: str, model: _Model) -> dict[int, str] | None:
        """Versions the policy wants loaded, each with the child of the base path it is
        loaded from; None when the base path cannot be read."""
        base_path = model.config.base_path
        try:
            children = os.listdir(base_path)
        except OSError:
            self._log_scan_problem_once(
                model,
                "FileSystemStoragePathSource encountered a filesystem access error: "
                f"Could not find base path {base_path} for servable {name}",
                logger.error,
            )
            return None
        found, duplicates = versions_by_dirname(
            [child for child in children if is_complete_version_dir(os.path.join(base_path, child))]
        )
        for warning in duplicates:
            if warning not in model.warned_duplicates:
                logger.warning(warning)
        model.warned_duplicates = set(duplicates)
        if not found:
            self._log_scan_problem_once(
                model,
                f"No versions of servable {name} found under base path {base_path}. "
                "Did you forget to name your leaf directory as a number (eg. '/1/')?",
                logger.warning,
            )
            return {}
        self._log_scan_problem_once(model, None, logger.info)
        policy = model.config.model_version_policy
        choice = policy.WhichOneof("policy_choice")
        if choice == "all":
            chosen = set(found)
        elif choice == "specific":
            chosen = set(found) & set(policy.specific.versions)
        else:
            num_versions = policy.latest.num_versions if choice == "latest" else 0
            chosen = set(sorted(found)[-max(num_versions, 1) :])
        return {version: found[version] for version in chosen}

    def _poll_model(self, name: str, model: _Model) -> None:
        aspired = self._aspired_versions(name, model)
        if aspired is None:
            return
        for version in sorted(aspired, reverse=True):
            with self._lock:
                record = model.versions.get(version)
                # An END version starts afresh when aspired again, unless it ended by
                # running out of load retries.
                gave_up = (
                    record is not None and record.failed_loads > self._options.max_num_load_retries
                )
                if record is None or (record.state == END and not gave_up):
                    record = model.versions[version] = _Version(version)
                if record.state in (AVAILABLE, UNLOADING):
                    continue
                retries_left = record.failed_loads <= self._options.max_num_load_retries
                if record.failed_loads and (
                    not retries_left or time.monotonic() < record.next_load_time
                ):
                    continue
                record.dirname = aspired[version]
            self._load(name, model, record)
        with self._lock:
            aspired_available = any(
                model.versions[v].state == AVAILABLE for v in aspired if v in model.versions
            )
        # Availability preserving: the old version serves until an aspired one does.
        self._end_versions(
            name, model, keep=set(aspired), keep_available=bool(aspired) and not aspired_available
        )

    def _end_versions(
        self, name: str, model: _Model, keep: set[int], keep_available: bool = False
    ) -> None:
        """Brings every version outside `keep` to END.

        Available versions are unloaded (unless `keep_available`); versions waiting
        for a load retry stop waiting and keep their last error, as TF Serving ends a
        version that is no longer aspired. Caller holds the poll mutex, so no load is
        running and LOADING means "waiting for a retry".
        """
        with self._lock:
            to_unload = []
            for record in model.versions.values():
                if record.version in keep:
                    continue
                if record.state == AVAILABLE and not keep_available:
                    to_unload.append(record)
                elif record.state in (START, LOADING):
                    logger.info(
                        "Servable version %s is no longer aspired: ending its load",
                        servable_id(name, record.version),
                    )
                    record.state = END
        for record in to_unload:
            self._unload(name, record)

    # ------------------------------------------------------------ load/unload

    def _load(self, name: str, model: _Model, record: _Version) -> None:
        export_dir = os.path.join(model.config.base_path, record.dirname)
        with self._lock:
            record.state = LOADING
        logger.info("Loading servable version %s", servable_id(name, record.version))
        servable, error = None, None
        try:
            servable = self._load_fn(
                name, record.version, export_dir, self._options.saved_model_tags
            )
            if self._warmup_fn is not None:
                self._warmup_fn(servable)
        except Exception as exception:  # Any load failure is reported, never raised.
            error = _error_from_exception(exception)
        if error is not None:
            # What the attempt made goes now (out of the except block, whose exception's
            # traceback holds the load's frames), not when the garbage collector next runs.
            if servable is not None:
                servable.release()
            servable = None
            gc.collect()
            release_memory_to_system()
            with self._lock:
                record.failed_loads += 1
                record.error = error
                record.next_load_time = time.monotonic() + self._options.load_retry_interval_seconds
                gave_up = record.failed_loads > self._options.max_num_load_retries
                record.state = END if gave_up else LOADING
            logger.error(
                "Loading servable: %s failed: %s", servable_id(name, record.version), error
            )
            if gave_up:
                logger.error(
                    "Giving up on %s after %d attempts",
                    servable_id(name, record.version),
                    record.failed_loads,
                )
            return
        with self._lock:
            record.servable = servable
            record.error = None
            record.state = AVAILABLE
            self._lock.notify_all()
        logger.info("Successfully loaded servable version %s", servable_id(name, record.version))

    def _unload(self, name: str, record: _Version) -> None:
        ident = servable_id(name, record.version)
        logger.info("Quiescing servable version %s", ident)
        with self._lock:
            record.state = UNLOADING
            while record.in_flight:
                self._lock.wait()
            servable, record.servable = record.servable, None
        logger.info("Done quiescing servable version %s", ident)
        logger.info("Unloading servable version %s", ident)
        if servable is not None:
            servable.release()
            del servable  # The last reference: its graph and buffers are freed here.
            release_memory_to_system()
        with self._lock:
            record.state = END
        logger.info("Done unloading servable version %s", ident)

    def _report_availability(self) -> None:
        with self._lock:
            configured = [model for model in self._models.values() if model.config is not None]
            all_available = bool(configured) and all(
                any(r.state == AVAILABLE for r in model.versions.values()) for model in configured
            )
            changed = all_available != self._all_available
            self._all_available = all_available
        if changed and self._on_availability_change is not None:
            self._on_availability_change(all_available)

    def cancel_runs(self) -> None:
        """Aborts the model runs under way on every loaded version (their Sessions close) and
        makes later runs fail with CANCELLED: for a shutdown whose grace period is over."""
        with self._lock:
            servables = [
                record.servable
                for model in self._models.values()
                for record in model.versions.values()
                if record.servable is not None
            ]
        for servable in servables:
            servable.release()

    def stop(self) -> None:
        """Stops polling and unloads every version, waiting for requests using them."""
        self._stop.set()
        if self._poll_thread is not None:
            self._poll_thread.join()
        with self._poll_mutex:
            with self._lock:
                loaded = [
                    (name, record)
                    for name, model in self._models.items()
                    for record in model.versions.values()
                    if record.state == AVAILABLE
                ]
            for name, record in loaded:
                self._unload(name, record)
        self._report_availability()

    # ---------------------------------------------------------------- requests

    def _resolve(self, model_spec: model_pb2.ModelSpec) -> _Version:
        """Finds the version a ModelSpec asks for; caller holds the lock."""
        if not model_spec.name:
            raise errors.invalid_argument("ModelSpec has no name specified.")
        model = self._models.get(model_spec.name)
        name = errors.quote(model_spec.name)
        choice = model_spec.WhichOneof("version_choice")
        if choice == "version_label":
            label = model_spec.version_label
            labels = model.version_labels if model is not None else {}
            if label not in labels:
                raise errors.invalid_argument(
                    f"Unrecognized servable version label: {errors.quote(label)}"
                )
            version, request = labels[label], f"Specific({name}, {labels[label]})"
        elif choice == "version":
            version, request = (
                model_spec.version.value,
                f"Specific({name}, {model_spec.version.value})",
            )
        else:
            version, request = None, f"Latest({name})"
        records = model.versions if model is not None else {}
        if version is None:
            available = [r for r in records.values() if r.state == AVAILABLE]
            record = max(available, key=lambda r: r.version) if available else None
        else:
            record = records.get(version)
        if record is None or record.state != AVAILABLE:
            raise errors.not_found(f"Servable not found for request: {request}")
        return record

    @contextlib.contextmanager
    def servable(self, model_spec: model_pb2.ModelSpec) -> Iterator[Servable]:
        """Borrows the version a ModelSpec resolves to for the duration of a request.

        Raises:
            ServingError: INVALID_ARGUMENT (no name, unknown label) or NOT_FOUND
                ("Servable not found for request: Latest(NAME)" /
                "Specific(NAME, N)").
        """
        with self._lock:
            record = self._resolve(model_spec)
            record.in_flight += 1
            servable = record.servable
        try:
            yield servable
        finally:
            with self._lock:
                record.in_flight -= 1
                if not record.in_flight:
                    self._lock.notify_all()

    def version_statuses(self, model_name: str, version: int | None = None) -> list[VersionStatus]:
        """GetModelStatus rows, newest version first.

        Raises:
            ServingError: NOT_FOUND "Could not find version N of model NAME" /
                "Could not find any versions of model NAME".
        """
        with self._lock:
            model = self._models.get(model_name)
            records = model.versions if model is not None else {}
            if version is not None:
                if version not in records:
                    raise errors.not_found(
                        f"Could not find version {version} of model {errors.quote(model_name)}"
                    )
                selected = [records[version]]
            else:
                if not records:
                    raise errors.not_found(
                        f"Could not find any versions of model {errors.quote(model_name)}"
                    )
                selected = sorted(records.values(), key=lambda r: r.version, reverse=True)
            return [VersionStatus(r.version, r.state, r.error) for r in selected]

    def version_states(self) -> list[tuple[str, int, str]]:
        """`(model name, version, state name)` of every version known, for the metrics."""
        with self._lock:
            return [
                (name, record.version, _State.Name(record.state))
                for name, model in sorted(self._models.items())
                for record in sorted(model.versions.values(), key=lambda r: r.version)
            ]

    def model_names(self) -> list[str]:
        with self._lock:
            return sorted(name for name, model in self._models.items() if model.config is not None)
