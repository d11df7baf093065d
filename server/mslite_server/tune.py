"""`mslite-triton tune`: sweep workers x threads of one model with Triton Model Analyzer, pick the best.

Model Analyzer (the `[tune]` extra) starts our tritonserver itself (`triton_launch_mode: local`) through a
wrapper script that adds the backend directory a local server composes (`Workspace`), loads one config variant
at a time, and measures it with perf_analyzer. Its results name the variants `MODEL_config_N`; the
variant's own config.pbtxt says which workers and threads it had (its `backend_parameter` column does
not). The chosen variant's config.pbtxt is written beside the results table and a throughput vs p99 plot,
with the same choice as a MindSpore Lite config file (`config.ini`, `[runner] workers_num` / `thread_num`)
for clients that build the model from its file.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mslite_contract.protocol import RUNNER_SECTION, THREAD_NUM_PARAMETER, THREADS_KEY, WORKERS_KEY
from mslite_server.parent_death import dies_with_parent
from mslite_server.ports import LOOPBACK, pick_ports
from mslite_server.workspace import Workspace, wheel_libs

CLIENT_CONFIG = "config.ini"  # the choice for `build_from_file`: context.parallel.config_path / config_path


class TuneError(RuntimeError):
    """The sweep could not run, or no variant met the objective."""


@dataclass(frozen=True)
class TuneOptions:
    """What to sweep and how long to measure each point."""

    model_dir: Path  # a model directory: config.pbtxt and a version folder with the model file
    output: Path
    workers: tuple[int, ...] = (1, 2)
    threads: tuple[int, ...] = (1, 2)
    concurrency: tuple[int, ...] = (4,)
    queue_delays_us: tuple[int, ...] = ()  # dynamic batcher max_queue_delay_microseconds to sweep; (): the config's
    window_ms: int = 2000  # perf_analyzer's measurement interval
    p99_budget_ms: float | None = None  # None: the highest throughput wins; else the highest within the budget
    model_analyzer: str = "model-analyzer"
    perf_analyzer: str = "perf_analyzer"


@dataclass(frozen=True)
class Variant:
    """One measured point: a config variant at one concurrency."""

    config: str  # Model Analyzer's name, e.g. `tiny_config_0` (`tiny_config_default`: the config as given)
    workers: int
    threads: int | None  # None: the config does not set it (the backend's default)
    concurrency: int
    queue_delay_us: int | None  # the dynamic batcher's max_queue_delay_microseconds; None: no batcher
    throughput: float  # inferences per second
    p99_ms: float


def tune(options: TuneOptions, progress: Callable[[str], None]) -> tuple[list[Variant], Variant]:
    """Run the sweep; write `config.pbtxt`, `config.ini`, `results.csv` and (with matplotlib) `throughput_p99.png`.

    Returns every measured variant and the chosen one.

    Raises:
        TuneError: a missing tool or model file, Model Analyzer failing, or no variant within the budget.
    """
    model_dir = options.model_dir.resolve()
    if not (model_dir / "config.pbtxt").is_file():
        raise TuneError(f"'{options.model_dir}' is not a model directory (no config.pbtxt)")
    analyzer = shutil.which(options.model_analyzer) or shutil.which(
        "model-analyzer", path=str(Path(sys.executable).parent)
    )
    if analyzer is None:
        raise TuneError(
            "Model Analyzer is not installed: the [tune] extra (in a checkout: .venv/bin/python -m pip install -e "
            "'.[tune]'; `make test` installs it)"
        )
    perf = shutil.which(options.perf_analyzer)
    if perf is None:
        raise TuneError(f"perf_analyzer not found ('{options.perf_analyzer}'); give its path with --perf-analyzer")
    work = Path(tempfile.mkdtemp(prefix="mslite-tune-"))
    workspace = Workspace()
    try:
        repo = work / "repository"
        repo.mkdir()
        shutil.copytree(model_dir, repo / model_dir.name)
        config = _analyzer_config(options, model_dir.name, repo, work, workspace)
        (work / "config.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML
        _run_analyzer(analyzer, work, progress)
        variants = _read_results(work / "export" / "results" / "metrics-model-inference.csv", work / "out")
        chosen = _choose(variants, options.p99_budget_ms)
        options.output.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(work / "out" / chosen.config / "config.pbtxt", options.output / "config.pbtxt")
        _write_client_config(chosen, model_dir.name, options, options.output / CLIENT_CONFIG)
        _write_table(variants, options.output / "results.csv")
        if not _plot(variants, chosen, options.output / "throughput_p99.png"):
            progress("(matplotlib is not installed: no plot)")
        return variants, chosen
    finally:
        workspace.remove()
        shutil.rmtree(work, ignore_errors=True)


def _analyzer_config(options: TuneOptions, name: str, repo: Path, work: Path, workspace: Workspace) -> dict:
    http, grpc, metrics = pick_ports([(LOOPBACK, 0, "http"), (LOOPBACK, 0, "grpc"), (LOOPBACK, 0, "metrics")])
    return {
        "model_repository": str(repo),
        "output_model_repository_path": str(work / "out"),
        "override_output_model_repository": True,
        "export_path": str(work / "export"),
        "checkpoint_directory": str(work / "checkpoints"),
        "triton_launch_mode": "local",
        "triton_server_path": str(_server_wrapper(work, workspace)),
        "perf_analyzer_path": str(_perf_wrapper(work, options.perf_analyzer)),
        "triton_http_endpoint": f"{LOOPBACK}:{http}",
        "triton_grpc_endpoint": f"{LOOPBACK}:{grpc}",
        "triton_metrics_url": f"http://{LOOPBACK}:{metrics}/metrics",
        "client_protocol": "grpc",
        "run_config_search_disable": True,  # exactly the sweep below
        "concurrency": list(options.concurrency),
        "skip_detailed_reports": True,
        # a shared CPU machine rarely holds 10 % for three windows in a row (measured: windows of 8 s)
        "perf_analyzer_flags": {"measurement-interval": options.window_ms, "stability-percentage": 50},
        "profile_models": {
            name: {
                "cpu_only": True,
                "model_config_parameters": _sweep(options),
            }
        },
    }


def _sweep(options: TuneOptions) -> dict:
    """Model Analyzer's `model_config_parameters`: every combination of these is one variant."""
    sweep: dict = {
        "instance_group": [{"kind": "KIND_CPU", "count": list(options.workers)}],
        "parameters": {THREAD_NUM_PARAMETER: {"string_value": [str(t) for t in options.threads]}},
    }
    if options.queue_delays_us:
        sweep["dynamic_batching"] = {"max_queue_delay_microseconds": list(options.queue_delays_us)}
    return sweep


def _server_wrapper(work: Path, workspace: Workspace) -> Path:
    """A `tritonserver` that Model Analyzer can start: the wheel's binary with our backend directory."""
    binary = workspace.compose()
    libs = wheel_libs()
    return _script(
        work / "tritonserver",
        f'export PATH="{Path(sys.executable).parent}:$PATH"\n'  # the workers' python packages
        f'export LD_LIBRARY_PATH="{libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\n'
        f'exec "{binary}" --backend-directory="{workspace.backends}" --cache-directory="{workspace.caches}" "$@"\n',
    )


def cuda_runtime_dir(binary: Path) -> str | None:
    """The CUDA runtime library directory that the binary's venv ships (tritonclient 2.40's binary needs it)."""
    venv = binary.parent.parent
    found = glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "nvidia" / "cuda_runtime" / "lib"))
    return found[0] if found else None


def _perf_wrapper(work: Path, perf_analyzer: str) -> Path:
    """perf_analyzer with the CUDA runtime library its venv ships."""
    binary = Path(shutil.which(perf_analyzer) or perf_analyzer).resolve()
    found = cuda_runtime_dir(binary)
    extra = f'export LD_LIBRARY_PATH="{found}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\n' if found else ""
    return _script(work / "perf_analyzer", f'{extra}exec "{binary}" "$@"\n')


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _run_analyzer(analyzer: str, work: Path, progress: Callable[[str], None]) -> None:
    command = [analyzer, "profile", "-f", str(work / "config.yaml")]
    lines: list[str] = []
    # (Model Analyzer ends with this process, however it ends: `parent_death`)
    popen = subprocess.Popen(
        dies_with_parent(command), cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    with popen as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            if "Profiling " in line or "Setting " in line or "ERROR" in line:
                progress(line.rstrip().removeprefix("[Model Analyzer] ").strip())
    if proc.returncode != 0:
        tail = "\n".join(lines[-15:])
        raise TuneError(f"Model Analyzer failed (exit {proc.returncode}):\n{tail}")


def _read_results(table: Path, variants_dir: Path) -> list[Variant]:
    if not table.is_file():
        raise TuneError("Model Analyzer wrote no results (see its output above)")
    variants = []
    with table.open(newline="") as f:
        for row in csv.DictReader(f):
            name = row["Model Config Path"]
            workers, threads, delay = _settings((variants_dir / name / "config.pbtxt").read_text())
            variants.append(
                Variant(
                    config=name,
                    workers=workers,
                    threads=threads,
                    concurrency=int(row["Concurrency"]),
                    queue_delay_us=delay,
                    throughput=float(row["Throughput (infer/sec)"]),
                    p99_ms=float(row["p99 Latency (ms)"]),
                )
            )
    return variants


def _settings(pbtxt: str) -> tuple[int, int | None, int | None]:
    """Instances, `thread_num` and batcher queue delay of a variant (Model Analyzer's table lacks the last two)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(pbtxt, model_config_pb2.ModelConfig())
    workers = sum(max(1, g.count) * max(1, len(g.gpus)) for g in config.instance_group) or 1
    param = config.parameters.get(THREAD_NUM_PARAMETER)
    threads = int(param.string_value) if param is not None and param.string_value else None
    delay = config.dynamic_batching.max_queue_delay_microseconds if config.HasField("dynamic_batching") else None
    return workers, threads, delay


def _choose(variants: list[Variant], p99_budget_ms: float | None) -> Variant:
    swept = [v for v in variants if not v.config.endswith("_config_default")] or variants
    fitting = [v for v in swept if p99_budget_ms is None or v.p99_ms <= p99_budget_ms]
    if not fitting:
        best = min(swept, key=lambda v: v.p99_ms)
        raise TuneError(f"no variant kept p99 within {p99_budget_ms} ms (the lowest was {best.p99_ms} ms)")
    return max(fitting, key=lambda v: v.throughput)


def format_table(variants: list[Variant], chosen: Variant) -> str:
    """The results, one line per variant and concurrency, the chosen one marked."""
    lines = [f"{'config':<28} {'workers':>7} {'threads':>7} {'delay_us':>8} {'conc':>5} {'infer/s':>10} {'p99 ms':>8}"]
    for v in sorted(variants, key=lambda v: -v.throughput):
        threads = "auto" if v.threads is None else str(v.threads)
        mark = "  <- chosen" if v == chosen else ""
        delay = "-" if v.queue_delay_us is None else str(v.queue_delay_us)
        numbers = f"{v.workers:>7} {threads:>7} {delay:>8} {v.concurrency:>5} {v.throughput:>10.1f} {v.p99_ms:>8.1f}"
        lines.append(f"{v.config:<28} {numbers}{mark}")
    return "\n".join(lines)


def _write_table(variants: list[Variant], path: Path) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["config", "workers", "threads", "queue_delay_us", "concurrency", "throughput_infer_s", "p99_ms"])
        for v in variants:
            delay = "" if v.queue_delay_us is None else v.queue_delay_us
            out.writerow([v.config, v.workers, v.threads or "", delay, v.concurrency, v.throughput, v.p99_ms])


def _write_client_config(chosen: Variant, name: str, options: TuneOptions, path: Path) -> None:
    """The choice in MindSpore Lite's config-file format, for clients that build the model from its file.

    `[runner]` is the client's own section (it never reaches the server): its `workers_num` and `thread_num`
    apply where the build's Context leaves them at 0. The queue delay goes in only when it was swept.
    """
    lines = [
        f"# mslite-triton tune {name}: {chosen.throughput:.1f} infer/s, p99 {chosen.p99_ms:.1f} ms "
        f"at concurrency {chosen.concurrency} ({chosen.config})",
        f"[{RUNNER_SECTION}]",
        f"{WORKERS_KEY}={chosen.workers}",
    ]
    if chosen.threads is not None:
        lines.append(f"{THREADS_KEY}={chosen.threads}")
    if options.queue_delays_us and chosen.queue_delay_us is not None:
        lines += ["[dynamic_batching]", f"max_queue_delay_microseconds={chosen.queue_delay_us}"]
    path.write_text("\n".join(lines) + "\n")


def _plot(variants: list[Variant], chosen: Variant, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for v in variants:
        threads = "as given" if v.threads is None else f"{v.threads}t"
        delay = "" if v.queue_delay_us is None else f" {v.queue_delay_us}us"
        label = f"{v.workers}w x {threads}{delay} c={v.concurrency}"
        ax.scatter(v.p99_ms, v.throughput, marker="*" if v == chosen else "o", s=120 if v == chosen else 40)
        ax.annotate(label, (v.p99_ms, v.throughput), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    ax.set_title("workers x threads")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return os.path.exists(path)


def _csv_ints(text: str, least: int = 1) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not values or min(values) < least:
        raise argparse.ArgumentTypeError(f"expected integers >= {least}, got '{text}'")
    return values


def _csv_ints0(text: str) -> tuple[int, ...]:
    return _csv_ints(text, least=0)


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register `mslite-triton tune MODEL_DIR` on the CLI's subcommands."""
    cmd = sub.add_parser("tune", help="sweep workers x threads of a model with Triton Model Analyzer ([tune] extra)")
    cmd.add_argument("model_dir", type=Path, help="the model's directory (config.pbtxt and a version folder)")
    cmd.add_argument("--workers", type=_csv_ints, default=(1, 2), help="instance counts to try (default 1,2)")
    cmd.add_argument("--threads", type=_csv_ints, default=(1, 2), help="thread_num values to try (default 1,2)")
    cmd.add_argument("--concurrency", type=_csv_ints, default=(4,), help="client concurrencies (default 4)")
    cmd.add_argument(
        "--queue-delays-us",
        type=_csv_ints0,
        default=(),
        help="dynamic batcher max_queue_delay_microseconds values to sweep too (default: the config's own)",
    )
    cmd.add_argument("--window-ms", type=int, default=2000, help="perf_analyzer measurement window (default 2000)")
    cmd.add_argument("--p99-budget-ms", type=float, help="choose the highest throughput with p99 within this")
    cmd.add_argument("--output", type=Path, help="where to write config.pbtxt, config.ini, results.csv and the plot "
                     "(default: ./<model>_tuned)")  # fmt: skip
    cmd.add_argument("--model-analyzer", default="model-analyzer", help="the model-analyzer executable")
    cmd.add_argument("--perf-analyzer", default="perf_analyzer", help="the perf_analyzer executable")
    cmd.set_defaults(func=_command)


def _command(args: argparse.Namespace) -> int:
    options = TuneOptions(
        model_dir=args.model_dir,
        output=args.output or Path(f"{args.model_dir.resolve().name}_tuned"),
        workers=args.workers,
        threads=args.threads,
        concurrency=args.concurrency,
        queue_delays_us=args.queue_delays_us,
        window_ms=args.window_ms,
        p99_budget_ms=args.p99_budget_ms,
        model_analyzer=args.model_analyzer,
        perf_analyzer=args.perf_analyzer,
    )

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        variants, chosen = tune(options, say)
    except TuneError as e:
        sys.stderr.write(f"mslite-triton tune: {e}\n")
        return 2
    say(format_table(variants, chosen))
    threads = chosen.threads or "auto"
    say(
        f"chosen: {chosen.workers} workers x {threads} threads; wrote {options.output / 'config.pbtxt'} (serving) "
        f"and {options.output / CLIENT_CONFIG} (the client's config_path)"
    )
    return 0
