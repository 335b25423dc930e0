package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// defaultBaseline is the commit the command path's CPU is compared with
// when BENCH_BASELINE names none: the code before the hot path was cut.
const defaultBaseline = "e72f5bf"

// buildBaseline builds the Hearth binary of the git ref BENCH_BASELINE
// (defaultBaseline when unset) into work, from an archive of that commit
// (the work tree and the repository's worktrees stay as they are), and
// returns its path and the ref.
func (b *bench) buildBaseline(ctx context.Context, work string) (bin, ref string, err error) {
	ref = cmp.Or(os.Getenv("BENCH_BASELINE"), defaultBaseline)
	src := filepath.Join(work, "baseline-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", ref, err
	}
	defer os.RemoveAll(src)
	b.progress("commands: building the baseline Hearth binary from %s", ref)
	archive := exec.CommandContext(ctx, "sh", "-c", `git archive --format=tar "$1" | tar -x -C "$2"`, "sh", ref, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", ref, fmt.Errorf("git archive %s: %w: %s", ref, err, out)
	}
	bin = filepath.Join(work, "hearth-baseline")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/app")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", ref, fmt.Errorf("build %s: %w: %s", ref, err, out)
	}
	return bin, ref, nil
}

// commandRows are the rows of the commands section.
func commandRows(c commandResults) []row {
	rows := c.fast.rows("", c.baselineRef)
	rows = append(rows, row{fmt.Sprintf("the same transaction from Go, concurrency %d, %s", concurrency, commandsFor),
		"", c.goLoop, "plain: pgx batches on database/sql connections, as Hearth sends them, without HTTP or JSON"})
	return append(rows, c.durable.rows(" with fsync and synchronous_commit on", "")...)
}

// rows are a cluster's rows; what says which cluster ("": the bench's).
func (c commandRun) rows(what, baselineRef string) []row {
	d := time.Duration(c.rounds) * commandsFor / commandRounds
	post := fmt.Sprintf("POST /v1/orders%s, concurrency %d, %s (requests/s, p99)", what, concurrency, d)
	perReq := func(r postResult) cpuPerRequest { return r.cpu.per(float64(len(r.lat))) }
	pg := c.pgbench.cpu.per(c.pgbench.cpuTx)
	rows := []row{{post + ", Hearth in mode api", c.api.String(), c.pgbench.String(),
		fmt.Sprintf("**%s of pgbench**. Plain: pgbench, same SQL shape, same concurrency, in %d turns with Hearth. CPU per request: %s; per pgbench transaction: Postgres %.0f µs, pgbench %.0f µs",
			percentOf(c.api.perSecond(), c.pgbench.perSecond()), c.rounds, perReq(c.api), pg.postgres, pg.process)}}
	switch {
	case c.baselineErr != "":
		rows = append(rows, row{post + ", baseline " + baselineRef + " in mode api", "no figure: " + c.baselineErr, "", ""})
	case len(c.baseline.lat) > 0:
		rows = append(rows, row{post + ", baseline " + baselineRef + " in mode api", c.baseline.String(), "",
			fmt.Sprintf("**Hearth's CPU per request: %s of the baseline's** (%.0f µs against %.0f µs). The binary of %s (BENCH_BASELINE), in turns with Hearth and pgbench: %s of pgbench. CPU per request: %s",
				percentOf(perReq(c.api).process, perReq(c.baseline).process), perReq(c.api).process, perReq(c.baseline).process,
				baselineRef, percentOf(c.baseline.perSecond(), c.pgbench.perSecond()), perReq(c.baseline))})
	}
	return append(rows, row{post + ", Hearth in mode all", c.all.String(), c.pgbenchAll.String(),
		fmt.Sprintf("**%s of pgbench**, with the projector on the same two cores. Plain: pgbench as above, in %d turns with mode all (which writes to a database of its own, so pgbench's rows do not wake its projector). CPU per request: %s",
			percentOf(c.all.perSecond(), c.pgbenchAll.perSecond()), c.rounds, perReq(c.all))})
}
