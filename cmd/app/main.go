// Command app is Hearth: one binary that serves the HTTP API, runs the
// projections, or both, and carries the operator's subcommands.
//
//	app [serve] [--mode api|worker|all] [--http-addr :8080]
//	app migrate
//	app keys create|list|revoke|rotate ...
//	app audit list [--limit N] [--target T] [--action A] [--json]
//	app customers export --merchant NAME ID [--by WHO]
//	app customers erase --merchant NAME ID --confirm ID [--by WHO]
//	app staff export --merchant NAME ID [--by WHO]
//	app staff erase --merchant NAME ID --confirm ID [--by WHO]
//	app erasures list [--json] | run | export | apply FILE [--by WHO]
//	app projections rewind [--by WHO]
//	app protect [--by WHO] [--batch N]
//	app dev      (make run: a throwaway Postgres when DATABASE_URL is unset)
//	app parked list|replay|skip ...
//	app verify [--projection P]
//	app rebuild PROJECTION
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"hearth/adapters/readmodel"
	"hearth/adapters/webhooks"

	// Go's copy of the time zone database, read only where the machine
	// has none (time.LoadLocation tries the system's first): without it,
	// on a host or image without tzdata every zone but UTC is unknown,
	// and with it every plan and availability query of a merchant that
	// set one.
	_ "time/tzdata"
)

const usage = `usage:
  app [serve] [--mode api|worker|all] [--http-addr ADDR]   run Hearth (default)
  app migrate                                              apply migrations and exit
  app keys create --role operator|worker --merchant NAME [--staff ID] [--name N] [--expires-in D | --expires-at T] [--by WHO]
  app keys create --role admin [--name N] [--expires-in D | --expires-at T] [--by WHO]   a platform key (no merchant)
  app keys list [--merchant NAME] [--json]                 keys, newest first (never their secrets)
  app keys revoke ID [--by WHO]                            the key is refused within KEY_CACHE_TTL (API instances cache keys)
  app keys rotate ID [--grace D] [--by WHO]                a new key like it; the old one is revoked, or works for D more
  app audit list [--limit N] [--target T] [--action A] [--json]
                                                          the admin audit log, newest first (of one target or action: however old)
  app customers export --merchant NAME ID [--by WHO]       everything held about one customer, as JSON (recorded in the audit log)
  app customers erase --merchant NAME ID --confirm ID [--by WHO]
                                                          erase a customer's personal data, irreversibly (recorded in the audit log)
  app staff export --merchant NAME ID [--by WHO]           everything held about one staff member, as JSON (recorded in the audit log)
  app staff erase --merchant NAME ID --confirm ID [--by WHO]
                                                          erase a staff member's personal data, irreversibly
  app erasures list [--json]                               erasures whose second pass has not run yet (not complete)
  app erasures run                                         run the second passes that are due now (what the erasure worker does)
  app erasures export                                      the erasures on record (ids, no personal data), as JSON: keep it beside the backups
  app erasures apply FILE [--by WHO]                       after a restore: erase again every subject FILE (an export) lists that is not erased
  app projections rewind [--by WHO]                        after restoring the read model (two databases), every instance stopped:
                                                          the projections read their topics again from the oldest message kept
  app protect [--by WHO] [--batch N]                       seal the personal fields of events written before they were sealed
                                                          (run once after upgrading to sealed personal data; safe to re-run)
  app keyring new [ID]                                     print a new master key line (ID:KEY) for MASTER_KEY; stores nothing
  app keyring rewrap [--by WHO]                            re-seal every secret under the first master key, so the others can go
  app dev [--mode ...] [--http-addr ...]                   run with a throwaway Postgres when DATABASE_URL is unset (and nats-server when installed and RELAY_NATS_URL is unset)
  app parked list [--projection P] [--json]                parked aggregates
  app parked replay PROJECTION ID | --all [--projection P] [--by WHO]   apply their waiting events in order
  app parked skip PROJECTION ID --reason WHY [--event ID] [--by WHO]   skip the first waiting event
  app verify [--projection P] [--recheck 2s]               compare the read models with the event store
  app rebuild PROJECTION [--by WHO]                        rebuild orders, plans, schedules or service_requests without downtime
settings come from the environment: DATABASE_URL, READMODEL_DATABASE_URL, HTTP_ADDR, MODE, and
more (every one is in README.md's configuration table)`

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg + "\n" + usage }

// defaultMemoryLimit is the Go runtime's soft memory limit unless
// GOMEMLIMIT sets another: the garbage collector works harder as the heap
// nears it, so a catch-up burst does not double the process's memory.
const defaultMemoryLimit = 96 << 20

// defaultGCPercent is the garbage collector's GOGC unless the environment
// sets one: a request's garbage is short-lived and the live heap small, so
// collecting at three times the live heap rather than twice spends about
// half the CPU on marking, and the memory limit still bounds the heap.
const defaultGCPercent = 200

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Getenv, os.Stderr))
}

// report writes run's error on stderr and returns the exit status: 0, 1
// for a failure, 2 for a bad command line. With LOG_FORMAT=json it is a
// log record like the others (the usage left out), since a pipeline that
// reads JSON lines would drop or split a line of text: the one that says
// why Hearth stopped.
func report(err error, getenv func(string) string, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	status, msg := 1, err.Error()
	if usage := (usageError{}); errors.As(err, &usage) {
		status, msg = 2, usage.msg+" (app help prints the usage)"
	}
	if getenv("LOG_FORMAT") == "json" {
		slog.New(slog.NewJSONHandler(stderr, nil)).Error("hearth failed", "error", msg, "exit_status", status)
		return status
	}
	fmt.Fprintln(stderr, "hearth:", err)
	return status
}

// run dispatches a subcommand. stdout carries only what scripts capture
// (keys); logs go to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	isHelp := func(arg string) bool { return arg == "-h" || arg == "--help" || arg == "-help" }
	if len(args) > 0 && isHelp(args[0]) {
		cmd, args = "help", args[1:]
	} else if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	sub := ""
	switch cmd {
	case "serve", "dev", "migrate", "verify", "rebuild", "protect":
	case "keys", "audit", "customers", "staff", "erasures", "keyring", "parked", "projections":
		subs := map[string][]string{"keys": {"create", "list", "revoke", "rotate"}, "audit": {"list"}, "customers": {"export", "erase"},
			"staff": {"export", "erase"}, "erasures": {"list", "run", "export", "apply"}, "keyring": {"new", "rewrap"}, "parked": {"list", "replay", "skip"}, "projections": {"rewind"}}[cmd]
		if len(args) > 0 && isHelp(args[0]) { // `app keys --help`: help after a command, as before it
			fmt.Fprintln(stdout, usage)
			return nil
		}
		if len(args) == 0 || !slices.Contains(subs, args[0]) {
			return usageError{fmt.Sprintf("%s: the subcommands are %s", cmd, strings.Join(subs, ", "))}
		}
		sub, args = args[0], args[1:]
	case "help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		return usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var keyArgs keyFlags
	keyArgs.register(cmd, sub, fs)
	var opArgs opsFlags
	opArgs.register(cmd, sub, fs)
	var customerArgs customerFlags
	customerArgs.register(cmd, sub, fs)
	var protectArgs protectFlags
	protectArgs.register(cmd, fs)
	cfg, rest, err := loadConfig(getenv, fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp): // -h or --help after the command, as before it
		fmt.Fprintln(stdout, usage)
		return nil
	case errors.As(err, new(usageError)): // the command line's, not a setting's
		return err
	case err != nil:
		return fmt.Errorf("configuration: %w", err)
	}
	switch cmd {
	case "parked", "rebuild", "keys", "audit", "customers", "staff", "keyring", "erasures":
		if rest, err = parseInterleaved(fs, rest); errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, usage)
			return nil
		} else if err != nil {
			return err
		}
	default:
		if len(rest) > 0 {
			return usageError{fmt.Sprintf("%s: unexpected arguments %q", cmd, rest)}
		}
	}
	fs.Visit(func(f *flag.Flag) {
		opArgs.projectionGiven = opArgs.projectionGiven || f.Name == "projection"
		keyArgs.merchantGiven = keyArgs.merchantGiven || f.Name == "merchant"
	})
	// loadConfig registers --mode and --http-addr on every command's flag
	// set (they override MODE and HTTP_ADDR); only serve and dev listen, so
	// on any other command they would be ignored without a word.
	if cmd != "serve" && cmd != "dev" {
		var serveFlags []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "mode" || f.Name == "http-addr" {
				serveFlags = append(serveFlags, "--"+f.Name)
			}
		})
		if len(serveFlags) > 0 {
			return usageError{fmt.Sprintf("%s: %s is a flag of serve and dev only", strings.TrimSpace(cmd+" "+sub), strings.Join(serveFlags, ", "))}
		}
	}
	// An empty --by would read as left out (cli:$USER): someone who typed
	// it meant to name who acts, so it is a mistake, not the default.
	emptyBy := false
	fs.Visit(func(f *flag.Flag) { emptyBy = emptyBy || f.Name == "by" && f.Value.String() == "" })
	if emptyBy {
		return usageError{fmt.Sprintf("%s: --by: must not be empty (leave it out for cli:$USER)", strings.TrimSpace(cmd+" "+sub))}
	}
	if opArgs.recheck < 0 {
		return usageError{fmt.Sprintf("%s: --recheck must not be negative (0 reports at once), got %s", cmd, opArgs.recheck)}
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)
	switch cmd {
	case "migrate":
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		return migrate(ctx, cfg, log)
	case "keys", "audit":
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		if cmd == "audit" {
			return auditList(ctx, cfg, keyArgs, rest, stdout)
		}
		return keys(ctx, cfg, sub, keyArgs, rest, getenv, stdout)
	case "customers", "staff":
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		if sub == "erase" {
			return eraseSubject(ctx, cfg, log, cmd, customerArgs, rest, getenv, stdout)
		}
		return exportSubject(ctx, cfg, log, cmd, customerArgs, rest, getenv, stdout)
	case "erasures":
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		switch sub {
		case "export":
			return erasuresExport(ctx, cfg, log, rest, stdout)
		case "apply":
			return erasuresApply(ctx, cfg, log, opArgs, rest, getenv, stdout)
		}
		if len(rest) > 0 {
			return usageError{fmt.Sprintf("erasures %s: unexpected arguments %q", sub, rest)}
		}
		return erasures(ctx, cfg, log, sub, opArgs, stdout)
	case "projections":
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		return projectionsRewind(ctx, cfg, log, opArgs, getenv, stdout)
	case "protect":
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		return protect(ctx, cfg, log, protectArgs, getenv, stdout)
	case "keyring":
		return keyringCommand(ctx, cfg, sub, keyArgs, rest, getenv, stdout)
	case "dev":
		return dev(ctx, cfg, log, stdout)
	case "parked", "verify", "rebuild":
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		switch cmd {
		case "parked", "verify":
			// Checked before parked and verify open (and migrate) the
			// databases, as rebuild checks its projection. Verify compares
			// the read models; parking holds the webhook fan-out's
			// projections too, which park aggregates as the read models do.
			known := readmodel.Projections()
			if cmd == "parked" {
				known = append(known, webhooks.ProjectionNames()...)
			}
			if p := opArgs.projection; p != "" && !slices.Contains(known, p) {
				return usageError{fmt.Sprintf("%s: --projection: unknown projection %q; one of %s",
					strings.TrimSpace(cmd+" "+sub), p, strings.Join(known, ", "))}
			}
			if cmd == "parked" {
				return parked(ctx, cfg, log, opArgs, sub, rest, getenv, stdout)
			}
			return verify(ctx, cfg, log, opArgs, stdout, stderr)
		default:
			return rebuild(ctx, cfg, log, opArgs, rest, getenv, stdout, stderr)
		}
	default:
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		if err := cfg.requireMasterKeys(); err != nil {
			return err
		}
		return serve(ctx, cfg, log)
	}
}
