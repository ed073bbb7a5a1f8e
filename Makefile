# redis-lock: `make run` starts a redis-server with the module, `make test` runs every test.
# Both first install what is missing (scripts/ensure-deps.sh).

MODULE := target/release/libredis_lock.so
PORT   ?= 6390

.PHONY: all build run test test-matrix unit check bench clean deps

all: build

deps:
	@bash scripts/ensure-deps.sh

build: deps
	cargo build --release

$(MODULE): build

# Foreground server on 127.0.0.1:$(PORT) with the module loaded; Ctrl-C stops it.
run: build
	@echo
	@echo "redis-lock: redis-server on 127.0.0.1:$(PORT) with $(MODULE)"
	@echo "  connect:  redis-cli -p $(PORT)"
	@echo "  try:      LOCK.ACQUIRE orders:42 my-token 30000"
	@echo "            LOCK.INFO orders:42"
	@echo "            LOCK.RELEASE orders:42 my-token"
	@echo
	redis-server redis.conf.example --port $(PORT)

# Unit tests of the pure logic, then the integration tests against real servers.
test: build
	cargo test --release

# Module against the Lua way and plain native commands, in one run; writes bench-results.json.
bench: build
	cargo bench --bench bench

# Integration tests against each server: Redis 7.0 (system), Valkey 8.1/9.1 and Redis 8.2
# (PyPI wheels in venvs under target/matrix/). SERVERS="valkey-9.1" runs only some.
test-matrix: build
	bash scripts/test-matrix.sh $(SERVERS)

unit:
	cargo test --release --lib

check:
	cargo fmt --check
	cargo clippy --release --all-targets -- -D warnings

clean:
	cargo clean
