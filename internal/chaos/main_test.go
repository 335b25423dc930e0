package chaos

import (
	"flag"
	"os"
	"testing"

	"hearth/internal/pgtest"
)

var (
	rounds = flag.Int("chaos.rounds", len(faults), "number of TestChaos rounds; the faults are taken in turn")
	report = flag.String("chaos.report", "", "a Markdown file TestChaos writes its figures to at the end of a passing run (make chaos: docs/chaos.md)")

	haRounds = flag.Int("chaos.ha.rounds", len(haFaults), "number of TestChaosHA rounds; the faults are taken in turn")
	haReport = flag.String("chaos.ha.report", "", "a Markdown file TestChaosHA writes its figures to, as a section of its own, at the end of a passing run (make chaos-ha: docs/chaos.md)")
)

// TestMain starts the package's own throwaway Postgres, which the tests
// restart, with fsync and synchronous_commit on: a crash (pg_ctl restart -m
// immediate) must not lose an acknowledged command. (No goleak: the processes under test are separate, and what
// matters here is what they do, not this test binary's goroutines.)
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(pgtest.MainDurable(m))
}
