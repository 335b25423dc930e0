package main

import (
	"testing"

	"go.uber.org/goleak"

	"hearth/internal/pgtest"
)

// pgtestRunner runs the tests inside pgtest.Main, so that the throwaway
// Postgres is stopped before goleak looks for goroutines left behind.
type pgtestRunner struct{ m *testing.M }

func (r pgtestRunner) Run() int { return pgtest.Main(r.m) }

// TestMain starts one throwaway Postgres for the package's tests and checks,
// once they pass, that none of them leaked a goroutine: every test stops the
// projections, the HTTP server and the pools it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtestRunner{m})
}
