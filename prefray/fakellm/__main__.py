"""`python -m prefray.fakellm --port P [--rpm N] [--latency S] [--fault-rate F] ...`"""

from __future__ import annotations

import argparse
import asyncio

from prefray.fakellm import batches
from prefray.fakellm.server import FAULT_KINDS, FakeOptions, start


def parse_args(argv: list[str] | None = None) -> tuple[str, int, FakeOptions]:
    parser = argparse.ArgumentParser(prog="python -m prefray.fakellm", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--model-latency", default="",
                        help="MODEL=SECONDS[,MODEL=SECONDS]: these models answer after this latency instead")
    parser.add_argument("--latency-sigma", type=float, default=0.0,
                        help="draw each answer's latency lognormal: the latency is its median, this the sigma of "
                             "its logarithm (0 = fixed)")
    parser.add_argument("--rpm", type=float, default=None, help="requests per minute before 429")
    parser.add_argument("--model-limits", default="",
                        help="MODEL=RPM:TPM[,MODEL=RPM:TPM]: these models' own limits (an empty side: no limit)")
    parser.add_argument("--tpm", type=float, default=None, help="input tokens per minute before 429")
    parser.add_argument("--limit-models", default="",
                        help="comma-separated model ids the --rpm/--tpm limits apply to (default: all)")
    parser.add_argument("--fault-rate", type=float, default=0.0,
                        help="share of distinct requests that fail on their first arrival")
    parser.add_argument("--sticky-fault-rate", type=float, default=0.0,
                        help="share of distinct requests that fail on every arrival")
    parser.add_argument("--faults", default="429,500,malformed",
                        help=f"comma-separated fault kinds among {','.join(FAULT_KINDS)}")
    parser.add_argument("--timeout-fault-seconds", type=float, default=30.0)
    parser.add_argument("--reject", default="",
                        help="MODEL=STATUS[,MODEL=STATUS]: always answer these models with this HTTP status")
    parser.add_argument("--inflate-input", type=float, default=1.0,
                        help="report (and count) this many times the real input tokens")
    parser.add_argument("--strict-window", type=float, default=None,
                        help="enforce --rpm as a sliding window of this many seconds (no burst allowance)")
    parser.add_argument("--context-tokens", type=int, default=None,
                        help="refuse prompts above this many input tokens (HTTP 400, context length exceeded)")
    parser.add_argument("--cache-lifetime", type=float, default=300.0,
                        help="seconds a cached prompt prefix is kept after its last use")
    parser.add_argument("--cache-min-tokens", type=int, default=1024, help="shortest prompt prefix cached")
    batches.add_arguments(parser)
    args = parser.parse_args(argv)
    faults = tuple(k for k in args.faults.split(",") if k)
    unknown = [k for k in faults if k not in FAULT_KINDS]
    if unknown:
        parser.error(f"--faults: unknown kind(s) {unknown}; choose among {list(FAULT_KINDS)}")
    limited = tuple(m for m in args.limit_models.split(",") if m)
    rejected = {m: int(code) for m, _, code in (item.partition("=") for item in args.reject.split(",") if item)}
    model_latency = {m: float(s) for m, _, s in (item.partition("=") for item in args.model_latency.split(",") if item)}
    model_limits = {m: tuple(float(x) if x else None for x in limits.split(":", 1))
                    for m, _, limits in (item.partition("=") for item in args.model_limits.split(",") if item)}
    options = FakeOptions(latency_s=args.latency, model_latency_s=model_latency, rpm=args.rpm, tpm=args.tpm,
                          latency_sigma=args.latency_sigma, model_limits=model_limits,
                          limited_models=limited, fault_rate=args.fault_rate,
                          sticky_fault_rate=args.sticky_fault_rate, faults=faults,
                          timeout_fault_s=args.timeout_fault_seconds, context_tokens=args.context_tokens,
                          strict_window_s=args.strict_window, rejected=rejected, inflate_input=args.inflate_input,
                          batch=batches.options_from(args), cache_lifetime_s=args.cache_lifetime,
                          cache_min_tokens=args.cache_min_tokens)
    return args.host, args.port, options


async def serve(host: str, port: int, options: FakeOptions) -> None:
    await start(host, port, options)
    print(f"prefray fake provider listening on http://{host}:{port}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    host, port, options = parse_args(argv)
    try:
        asyncio.run(serve(host, port, options))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
