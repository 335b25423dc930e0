// Command bench measures Hearth's projection pipeline and write path on a
// throwaway Postgres and prints one table (make bench):
//
//   - append-to-visible latency at a steady 200 events/s (Hearth, as a
//     separate process, against plain watermill-sql polling every 250 ms);
//   - the latency curve: append-to-visible and webhook delivery latency of
//     the same events at 200, 1,000 and 2,000 events/s;
//   - catch-up throughput on a 100,000-event backlog (Hearth against plain
//     watermill-sql with a handler that does nothing and with one
//     transaction per event);
//   - the healthy projection's latency while another one fails on every
//     event;
//   - command throughput over HTTP at concurrency 16 against pgbench running
//     the same SQL shape;
//   - the noisy neighbour: one merchant's reads at a steady rate while
//     another floods (unknown keys, its heaviest list, its writes), with
//     Hearth's default limits;
//   - the console's dispatch board with 50 staff and 500 schedules in the
//     week against an empty board: page weight and time to first render
//     in headless Chromium;
//   - availability: the bookable slots of two weeks with 50 staff and 500
//     schedules, over HTTP, beside a plain SQL read of the same schedules;
//   - the event feed: commit to the answer of the long poll that carries
//     the event, beside the read-your-writes GET's commit to answer, alone
//     and with idle long polls of other merchants;
//   - webhooks: delivery latency from the commit to a receiver at 200
//     events/s beside the read model's latency of the same events, the same
//     beside a slow endpoint, and the rate a receiver drains a backlog at,
//     beside Hearth's sender alone;
//   - read replicas: GET and list throughput with the GETs on a streaming
//     replica beside everything on the primary, the command rate
//     meanwhile, and read-your-writes latency through the replica;
//   - sealing personal fields, beside the same binary with
//     PERSONAL_DATA_SEALING=off in the same run: CPU per POST /v1/orders in
//     mode api, the catch-up rate of a sealed backlog against the same
//     backlog in clear, and the time to erase a customer with 1,000 orders;
//   - tracing every request (OTLP over HTTP, sampler always_on) beside the
//     same binary with tracing off in the same run: POST /v1/orders rate and
//     CPU per request in mode api;
//   - the peak RSS of the Hearth processes.
//
// Every Hearth process's CPU profile is saved in bench-profiles/, and
// docs/benchmarks.md lists the top functions of some of them.
//
// Benchmarks measure; nothing here asserts.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"hearth/internal/harness"
	"hearth/internal/pgcluster"
)

// Durations and sizes of the runs (BENCH_QUICK=1 divides them by 10, for
// trying the bench itself out).
var (
	rate           = 200 // events/s for the latency runs
	latencyFor     = 30 * time.Second
	latencyWarmUp  = 3 * time.Second // run at the rate first; not counted
	isolationFor   = 15 * time.Second
	backlogEvents  = 100_000
	perEventTxFor  = 15 * time.Second
	commandsFor    = 20 * time.Second
	concurrency    = 16
	fallbackPoll   = 250 * time.Millisecond
	plainPollEvery = 250 * time.Millisecond
)

func main() {
	if os.Getenv("BENCH_QUICK") != "" {
		latencyFor, latencyWarmUp, isolationFor, perEventTxFor, commandsFor = latencyFor/10, latencyWarmUp/10, isolationFor/10, perEventTxFor/10, commandsFor/10
		curveFor, availabilityFor = curveFor/10, availabilityFor/10
		backlogEvents /= 10
		noisyFor /= 10
		hookBacklog /= 10
		feedIdlePolls /= 10
		consoleLoads = 5
		scaleOrders /= 10
		replicaFor, replicaRYWFor, replicaOrders = replicaFor/10, replicaRYWFor/10, replicaOrders/10
		sealingTurn /= 10
		tracingTurn /= 10
		erasureOrders /= 10
	}
	if err := checkOnly(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// sections are the runs, in order; BENCH_ONLY=commands,catchup runs some.
// scale runs only when named (make bench-scale): it takes about 15 minutes.
var sections = []string{"latency", "curve", "commands", "isolation", "catchup", "noisy", "console", "availability", "feed", "webhooks", "replicas", "sealing", "tracing", "scale"}

func only(section string) bool {
	v := os.Getenv("BENCH_ONLY")
	return (v == "" && section != "scale") || slices.Contains(strings.Split(v, ","), section)
}

func checkOnly() error {
	v := os.Getenv("BENCH_ONLY")
	if v == "" {
		return nil
	}
	for _, s := range strings.Split(v, ",") {
		if !slices.Contains(sections, s) {
			return fmt.Errorf("BENCH_ONLY: unknown section %q (sections: %s)", s, strings.Join(sections, ", "))
		}
	}
	return nil
}

// percentOf is rate as a share of reference.
func percentOf(rate, reference float64) string {
	if reference == 0 {
		return "no figure"
	}
	return fmt.Sprintf("%.0f %%", 100*rate/reference)
}

type row struct{ name, hearth, plain, note string }

func run() error {
	// Ctrl-C (or a timeout's SIGTERM) ends the runs, and the deferred
	// clean-up stops the Hearth processes and the cluster.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	work, err := os.MkdirTemp("", "hearth-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	progress("building the Hearth binary")
	bin := filepath.Join(work, "hearth")
	build := exec.Command("go", "build", "-o", bin, "./cmd/app")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	progress("starting a throwaway Postgres")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, Install: true, Log: log})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	b := &bench{cluster: cluster, bin: bin, log: log, progress: progress}
	defer b.stopProcesses()

	var rows []row
	if only("latency") {
		lat, err := b.latencyHearth(ctx)
		if err != nil {
			return fmt.Errorf("latency (hearth): %w", err)
		}
		plain, err := b.latencyPlain(ctx)
		if err != nil {
			return fmt.Errorf("latency (plain): %w", err)
		}
		rows = append(rows, row{fmt.Sprintf("append-to-visible latency at %d events/s, %s (p50 / p99 / max)", rate, latencyFor),
			lat.String(), plain.String(), fmt.Sprintf("plain: watermill-sql polling every %s", plainPollEvery)})
	}
	if only("curve") {
		cr, err := b.curve(ctx)
		if err != nil {
			return fmt.Errorf("latency curve: %w", err)
		}
		rows = append(rows, cr...)
	}
	if only("commands") {
		c, err := b.commands(ctx)
		if err != nil {
			return fmt.Errorf("commands: %w", err)
		}
		rows = append(rows, commandRows(c)...)
	}
	if only("isolation") {
		iso, err := b.isolation(ctx)
		if err != nil {
			return fmt.Errorf("isolation: %w", err)
		}
		rows = append(rows, row{fmt.Sprintf("healthy projection's latency while another fails on every event, %s (p50 / p99 / max)", isolationFor),
			iso.String(), "", "one extra projection on the same topic fails every attempt (retry budget running)"})
	}
	if only("catchup") {
		cu, err := b.catchUp(ctx)
		if err != nil {
			return fmt.Errorf("catch-up: %w", err)
		}
		rows = append(rows, cu...)
	}
	if only("noisy") {
		nn, err := b.noisy(ctx)
		if err != nil {
			return fmt.Errorf("noisy neighbour: %w", err)
		}
		rows = append(rows, nn...)
	}
	if only("console") {
		cs, err := b.console(ctx)
		if err != nil {
			return fmt.Errorf("console: %w", err)
		}
		rows = append(rows, cs...)
	}
	if only("availability") {
		av, err := b.availability(ctx)
		if err != nil {
			return fmt.Errorf("availability: %w", err)
		}
		rows = append(rows, av...)
	}
	if only("feed") {
		fr, err := b.feed(ctx)
		if err != nil {
			return fmt.Errorf("event feed: %w", err)
		}
		rows = append(rows, fr...)
	}
	if only("webhooks") {
		wh, err := b.webhooks(ctx)
		if err != nil {
			return fmt.Errorf("webhooks: %w", err)
		}
		rows = append(rows, wh...)
	}
	if only("replicas") {
		rr, err := b.replicas(ctx)
		if err != nil {
			return fmt.Errorf("replicas: %w", err)
		}
		rows = append(rows, rr...)
	}
	if only("sealing") {
		sr, err := b.sealing(ctx)
		if err != nil {
			return fmt.Errorf("sealing: %w", err)
		}
		rows = append(rows, sr...)
	}
	if only("tracing") {
		tr, err := b.tracing(ctx)
		if err != nil {
			return fmt.Errorf("tracing: %w", err)
		}
		rows = append(rows, tr...)
	}
	var scaleTable string
	if only("scale") {
		if scaleTable, err = b.scale(ctx); err != nil {
			return err
		}
	}
	rows = append(rows, row{"Hearth peak RSS (VmHWM, largest of its processes)", fmt.Sprintf("%.1f MB", float64(b.peakRSS)/1024), "", "by process: " + b.rssByProcess()})

	// A whole run is the record: docs/benchmarks.md is written by the
	// bench, never by hand. The main sections and the scale section are
	// written by their own runs, each keeping the other's part.
	record := os.Getenv("BENCH_QUICK") == "" && os.Getenv("BENCH_SCALE_ORDERS") == ""
	if scaleTable != "" {
		section := scaleHeader + machine("Hearth bench-scale") + scaleTable
		fmt.Print("\n" + section)
		if record && os.Getenv("BENCH_ONLY") == "scale" {
			return writeBenchmarks(func(main, _ string) string { return main + section })
		}
		return nil
	}
	table := formatTable(rows)
	tops := b.profileTops()
	fmt.Print(table + tops)
	fmt.Fprintf(os.Stderr, "bench: the CPU profile of each Hearth process is in %s/ (go tool pprof %s/<process>.pprof)\n", profileDir, profileDir)
	if record && os.Getenv("BENCH_ONLY") == "" {
		return writeBenchmarks(func(_, scale string) string {
			if scale != "" {
				scale = "\n" + scale
			}
			return benchmarksHeader + table + tops + scale
		})
	}
	return nil
}

// writeBenchmarks rewrites docs/benchmarks.md: doc gets its main part and
// its scale section (from "## Scale" on) as they are, and returns the new
// text.
func writeBenchmarks(doc func(main, scale string) string) error {
	path := filepath.Join("docs", "benchmarks.md")
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	main, scale := string(old), ""
	if i := strings.Index(main, "\n"+scaleHeading); i >= 0 {
		main, scale = main[:i+1], main[i+1:]
	}
	main = strings.TrimRight(main, "\n") + "\n\n"
	if err := os.WriteFile(path, []byte(doc(main, scale)), 0o644); err != nil {
		return fmt.Errorf("write docs/benchmarks.md: %w", err)
	}
	fmt.Fprintln(os.Stderr, "bench: wrote docs/benchmarks.md")
	return nil
}

// benchmarksHeader opens docs/benchmarks.md.
const benchmarksHeader = `# Benchmarks

Written by ` + "`make bench`" + ` (cmd/bench) at the end of a whole run; never edit it by hand. How each
row is measured is in cmd/bench (its package comment and each run's comment). Figures on a
shared VM move by 10-25 % from run to run: compare the columns of one run.

Targets: append-to-visible p50 <= 3 ms and p99 <= 15 ms at 200 events/s, and p99 <= 10 ms at
1,000 events/s; catch-up >= 10,000 events/s with every guarantee, and >= 40,000 events/s with
every consumer on (projections, webhook fan-out, relay); the healthy projection's p99 <= 100
ms while another fails; commands: Hearth's CPU per POST /v1/orders (mode api) at most half of
the baseline binary's, mode api >= 85 % and mode all >= 50 % of pgbench (fsync off and on),
Postgres CPU per command at most pgbench's per transaction; peak RSS <= 150 MB;
noisy neighbour: under B's heaviest flood, A's p99 at most 2 x its p99 under the unknown-key
flood, A keeps >= 90 % of its rate, and B is told 429. Sealing personal fields: at most +10 %
of Hearth's CPU per POST /v1/orders, and at least 90 % of the catch-up rate in clear.
Tracing every request: its cost beside tracing off. Availability with 50 staff, two weeks and
500 schedules: p99 <= 20 ms.
`

// machine is the line that says what ran where and when.
func machine(what string) string {
	return "\n" + harness.Machine(what) + "; Postgres on the same machine with fsync=off and synchronous_commit=off\n\n"
}

func formatTable(rows []row) string {
	var table strings.Builder
	table.WriteString(machine("Hearth bench"))
	fmt.Fprintf(&table, "| measure | Hearth | plain / reference | note |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&table, "| %s | %s | %s | %s |\n", r.name, r.hearth, r.plain, r.note)
	}
	return table.String()
}
