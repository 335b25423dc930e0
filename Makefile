# Hearth. `make run` starts it (with a throwaway Postgres when DATABASE_URL is
# unset); `make test` runs every test against a throwaway Postgres that the
# test harness starts itself.
GO ?= go

.PHONY: run test race chaos chaos-ha bench bench-scale build vet clean

run:
	$(GO) run ./cmd/app dev

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

# Every test under the race detector: about twice make test's time on two
# cores (cmd/app sets the length); run it after a change to code that
# shares memory between goroutines.
race:
	$(GO) test -race -count=1 -timeout 40m ./...

# The leadership fault suite: 24 rounds (each fault four times) instead of
# the one round per fault that make test runs; prints the takeover times
# and, when it passes, writes them to docs/chaos.md.
chaos:
	$(GO) test -count=1 -timeout 30m -v -run 'TestChaos' ./internal/chaos -chaos.rounds=24 -chaos.report=$(CURDIR)/docs/chaos.md

# The database failover suite: Hearth on a throwaway Patroni cluster (two
# Postgres nodes, three etcd members), 12 rounds (each fault three times:
# primary killed, switchover, primary frozen then resumed, etcd member
# lost) instead of make test's one per fault; prints the write outages
# and, when it passes, writes them to docs/chaos.md (a section of its own;
# about 8 minutes).
chaos-ha:
	$(GO) test -count=1 -timeout 60m -v -run 'TestChaosHA' ./internal/chaos -chaos.ha.rounds=12 -chaos.ha.report=$(CURDIR)/docs/chaos.md

# bench starts its own throwaway Postgres, builds and runs Hearth as a
# separate process, prints one table and writes docs/benchmarks.md (about
# 16 minutes on two cores).
bench:
	$(GO) run ./cmd/bench

# bench-scale builds a merchant of 2,000,000 events (500,000 orders) and one
# of 10,000, measures both the same way and writes the scale section of
# docs/benchmarks.md (about 15 minutes on 2 cores).
bench-scale:
	BENCH_ONLY=scale $(GO) run ./cmd/bench

build:
	$(GO) build -o bin/app ./cmd/app

clean:
	rm -rf bin .data
