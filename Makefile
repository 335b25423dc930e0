# Hearth. `make run` starts it (with a throwaway Postgres when DATABASE_URL is
# unset); `make test` runs every test against a throwaway Postgres that the
# test harness starts itself.
GO ?= go

.PHONY: run test build vet clean bench

run:
	$(GO) run ./cmd/app dev

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

# bench starts its own throwaway Postgres, builds and runs Hearth as a
# separate process, and prints one table (about 4 minutes).
bench:
	$(GO) run ./cmd/bench

build:
	$(GO) build -o bin/app ./cmd/app

clean:
	rm -rf bin .data
