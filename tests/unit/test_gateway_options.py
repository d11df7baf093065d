"""The gateway's options (mslite_contract.gateway_options): the launcher's argv and the gateway's reading agree."""

from __future__ import annotations

import dataclasses

import pytest

from mslite_contract.gateway_options import GatewayLimits, GatewayOptions

ADDRESSES = {"http_port": 8000, "grpc_port": 8001, "upstream_http": "unix:/tmp/s/http", "upstream_grpc": "h:9"}


def test_default_options_go_through_argv_unchanged() -> None:
    options = GatewayOptions(**ADDRESSES)
    assert GatewayOptions.from_argv(options.to_argv()) == options


def test_every_option_changed_goes_through_argv_unchanged() -> None:
    limits = GatewayLimits(
        **{
            f.name: (f.default * 3 + 0.1 if isinstance(f.default, float) else f.default * 3 + 1)
            for f in dataclasses.fields(GatewayLimits)
        }
    )
    options = GatewayOptions(**ADDRESSES, host="0.0.0.0", grace_s=0.3, staging=False, limits=limits)
    assert all(getattr(limits, f.name) != f.default for f in dataclasses.fields(GatewayLimits))
    parsed = GatewayOptions.from_argv(options.to_argv())
    assert parsed == options and parsed.limits.upstream_timeout_s == GatewayLimits().upstream_timeout_s * 3 + 0.1


def test_each_option_is_one_flag_named_after_its_field() -> None:
    argv = GatewayOptions(**ADDRESSES, staging=False, key_on_every_request=True).to_argv()
    names = [f.name for f in dataclasses.fields(GatewayOptions) if f.name != "limits"]
    names += [f.name for f in dataclasses.fields(GatewayLimits)]
    expected = ["--no-staging" if n == "staging" else "--" + n.replace("_", "-") for n in names]
    assert [a.split("=", 1)[0] for a in argv] == expected
    assert "--max-inflight-per-model=1000" in argv


def test_a_command_line_with_the_addresses_only_takes_every_default() -> None:
    argv = ["--http-port", "1", "--grpc-port", "2", "--upstream-http", "unix:/s/h", "--upstream-grpc", "unix:/s/g"]
    options = GatewayOptions.from_argv(argv)
    assert options.limits == GatewayLimits() and options.staging and options.host == "127.0.0.1"


def test_a_missing_address_or_a_bad_limit_ends_the_parse_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        GatewayOptions.from_argv(["--http-port", "1", "--grpc-port", "2", "--upstream-http", "unix:/s/h"])
    assert "--upstream-grpc" in capsys.readouterr().err
    argv = [*GatewayOptions(**ADDRESSES).to_argv(), "--body-stall-timeout-s=0"]
    with pytest.raises(SystemExit):
        GatewayOptions.from_argv(argv)
    assert "body_stall_timeout_s must be a number of seconds > 0, not 0.0" in capsys.readouterr().err


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(GatewayLimits)])
def test_limits_refuse_a_bound_below_one_or_a_time_of_zero(field: str) -> None:
    with pytest.raises(ValueError, match=f"gateway option {field} must be"):
        GatewayLimits(**{field: 0})
