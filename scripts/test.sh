#!/usr/bin/env bash
# The project's test command: everything CI checks, in order.
#
#   bash scripts/test.sh
#
# 1. system prerequisites (Debian: apt-get, only what is missing) and the Rust toolchain
#    pinned in rust-toolchain.toml (rustup from static.rust-lang.org when cargo is missing)
# 2. scripts/install-clients.sh: the real Kafka clients into .clients/ (pinned, idempotent)
# 3. cargo fmt --check, cargo clippy -D warnings, cargo build (all targets)
# 4. cargo test --workspace with KAFKA_CLIENTS_REQUIRED=1 and KAFKA_FIXTURES_REQUIRED=1:
#    the real-client suites and the fixture tests must run, not be skipped
# 5. cargo deny check (when deny.toml exists; cargo-deny is installed once, pinned)
#
# The Iggy suites (the bridge's storage suite and every real-client suite against a bridged
# gateway) run against the iggy-server binary named by IGGY_SERVER_BIN. Unset, the script
# takes ../shared/iggy/iggy-server beside the project when it exists (CI's machines have it;
# it needs the Debian package libhwloc15, installed here when missing). Point it at your own
# server build to run them elsewhere:
#
#   IGGY_SERVER_BIN=/path/to/iggy-server bash scripts/test.sh
#
# With CI=true the Iggy suites are mandatory (IGGY_REQUIRED=1): a suite that needs Iggy and
# cannot run fails instead of printing SKIPPED. Set IGGY_REQUIRED=0 to run without them.
#
# Runs as root or as a user with sudo on a fresh Debian 12 machine; every step is idempotent,
# so a second run only re-checks. Set SKIP_CARGO_DENY=1 to leave out step 5.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CARGO_DENY_VERSION=0.20.2
T0=$(date +%s)
LAST=$T0

section() {
  local now
  now=$(date +%s)
  printf '\n==== [%s | +%ss, total %ss] %s ====\n' "$(date +%H:%M:%S)" "$((now - LAST))" "$((now - T0))" "$*"
  LAST=$now
}
die() { echo "scripts/test.sh: $*" >&2; exit 1; }

# ---- 1. prerequisites ------------------------------------------------------------------
section "system prerequisites"
SUDO=()
((EUID == 0)) || SUDO=(sudo)
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }
have_cmd cc || need+=(build-essential)
have_cmd pkg-config || need+=(pkg-config)
have_cmd curl || need+=(curl ca-certificates)
have_cmd git || need+=(git)
have_cmd unzip || need+=(unzip)
have_cmd python3 || need+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
have_cmd node || need+=(nodejs)
have_cmd npm || need+=(npm)
if ((${#need[@]})); then
  have_cmd apt-get || die "missing ${need[*]} and no apt-get to install them"
  echo "apt: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  echo "build tools, python3-venv, node, npm, unzip, curl, git: present"
fi

# The Iggy server for the bridge's suites: IGGY_SERVER_BIN, else the shared build.
if [[ -z "${IGGY_SERVER_BIN:-}" && -x "$ROOT/../shared/iggy/iggy-server" ]]; then
  IGGY_SERVER_BIN="$(cd "$ROOT/../shared/iggy" && pwd)/iggy-server"
fi
if [[ "${CI:-}" == true && -z "${IGGY_REQUIRED:-}" ]]; then
  export IGGY_REQUIRED=1
fi
if [[ -n "${IGGY_SERVER_BIN:-}" ]]; then
  export IGGY_SERVER_BIN
  [[ -x "$IGGY_SERVER_BIN" ]] || die "IGGY_SERVER_BIN=$IGGY_SERVER_BIN is not an executable file"
  # The shared build links libhwloc.so.15 (Debian: libhwloc15).
  if have_cmd ldd && ldd "$IGGY_SERVER_BIN" 2>/dev/null | grep -q 'libhwloc.so.15 => not found'; then
    have_cmd apt-get || die "$IGGY_SERVER_BIN needs libhwloc.so.15 and there is no apt-get to install libhwloc15"
    echo "apt: installing libhwloc15 (needed by $IGGY_SERVER_BIN)"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends libhwloc15 >/dev/null
  fi
  if missing=$(ldd "$IGGY_SERVER_BIN" 2>/dev/null | grep 'not found'); then
    die "$IGGY_SERVER_BIN cannot be loaded: $missing"
  fi
  echo "Iggy suites: against $IGGY_SERVER_BIN${IGGY_REQUIRED:+ (IGGY_REQUIRED=$IGGY_REQUIRED)}"
elif [[ "${IGGY_REQUIRED:-}" == 1 ]]; then
  die "IGGY_REQUIRED=1 but no iggy-server: set IGGY_SERVER_BIN (or provide ../shared/iggy/iggy-server)"
else
  echo "Iggy suites: SKIPPED (set IGGY_SERVER_BIN=/path/to/iggy-server to run them)"
fi

if ! have_cmd cargo && [[ -f "$HOME/.cargo/env" ]]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
if ! have_cmd cargo; then
  echo "rust: cargo not found; installing rustup (the toolchain comes from rust-toolchain.toml)"
  tmp="$(mktemp -d)"
  curl --proto '=https' --tlsv1.2 -sSfL -o "$tmp/rustup-init" \
    "https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
  chmod +x "$tmp/rustup-init"
  "$tmp/rustup-init" -y --no-modify-path --profile minimal --default-toolchain none
  rm -rf "$tmp"
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
# rust-toolchain.toml pins the version and the rustfmt/clippy components; this installs
# them on first use
if have_cmd rustup; then
  rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
fi
cargo --version
rustc --version

# ---- 2. real Kafka clients ---------------------------------------------------------------
section "real Kafka clients (scripts/install-clients.sh)"
bash scripts/install-clients.sh

# ---- 3. format, lint, build -------------------------------------------------------------
# A clean CI build gains nothing from incremental compilation and its cache takes gigabytes.
if [[ "${CI:-}" == true ]]; then
  export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi
disk() { echo "disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free; target/ $(du -sh target 2>/dev/null | cut -f1)"; }
disk

section "cargo fmt --all -- --check"
cargo fmt --all -- --check

section "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

section "cargo clippy -p kafka-bench --features librdkafka --all-targets -- -D warnings"
cargo clippy -p kafka-bench --features librdkafka --all-targets -- -D warnings

section "cargo build --workspace --all-targets"
cargo build --workspace --all-targets
disk

# ---- 4. tests ------------------------------------------------------------------------------
section "cargo test --workspace --no-fail-fast (KAFKA_CLIENTS_REQUIRED=1 KAFKA_FIXTURES_REQUIRED=1)"
export KAFKA_CLIENTS_REQUIRED=1 KAFKA_FIXTURES_REQUIRED=1
# The output is kept to count the tests that ran against Iggy (test-support prints one
# `ON IGGY: <test>` line for each) and the ones that were skipped.
TEST_LOG="$ROOT/target/test-output.log"
mkdir -p "$ROOT/target"
cargo test --workspace --no-fail-fast 2>&1 | tee "$TEST_LOG"
on_iggy=$(grep -c '^ON IGGY: ' "$TEST_LOG" || true)
not_set=$(grep -c 'IGGY_SERVER_BIN not set' "$TEST_LOG" || true)
echo "tests that ran against Iggy: $on_iggy; skipped for want of IGGY_SERVER_BIN: $not_set"
if [[ "${IGGY_REQUIRED:-}" == 1 ]] && ((on_iggy == 0 || not_set > 0)); then
  die "IGGY_REQUIRED=1 but $on_iggy tests ran against Iggy and $not_set were skipped"
fi

section "kafka-bench smoke test against the gateway (cargo test -p kafka-bench --features librdkafka)"
cargo test -p kafka-bench --features librdkafka --no-fail-fast
disk

# ---- 5. cargo deny -------------------------------------------------------------------------
if [[ "${SKIP_CARGO_DENY:-}" == 1 ]]; then
  section "cargo deny: skipped (SKIP_CARGO_DENY=1)"
elif [[ ! -f deny.toml ]]; then
  section "cargo deny: skipped (no deny.toml)"
else
  section "cargo deny check"
  if ! cargo deny --version >/dev/null 2>&1; then
    echo "installing cargo-deny $CARGO_DENY_VERSION (built once, a few minutes)"
    if ! cargo install cargo-deny --version "=$CARGO_DENY_VERSION" --locked; then
      echo "WARNING: cargo-deny could not be installed; cargo deny check skipped" >&2
    fi
  fi
  if cargo deny --version >/dev/null 2>&1; then
    cargo deny --version
    # The advisory database is a git repository on github.com. Where only package
    # registries are reachable it cannot be fetched: check everything else then, loudly.
    if timeout 30 git ls-remote https://github.com/rustsec/advisory-db HEAD >/dev/null 2>&1; then
      cargo deny check
    else
      echo "WARNING: github.com/rustsec/advisory-db is unreachable: advisories NOT checked;" \
        "checking licenses, bans and sources" >&2
      cargo deny check licenses bans sources
    fi
  fi
fi

section "all checks passed"
