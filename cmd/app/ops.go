package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"hearth/adapters/readmodel"
	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/uuid"
	httpport "hearth/ports/http"
)

// opsFlags are the flags of the operator's subcommands.
type opsFlags struct {
	projection string
	all        bool
	reason     string
	eventID    string
	by         string
	asJSON     bool
	recheck    time.Duration
	// projectionGiven says --projection was on the command line, so that
	// an empty one is refused rather than read as every projection.
	projectionGiven bool
}

// register registers the flags of cmd's subcommand sub only, so that a
// flag of another subcommand is refused, not ignored.
func (o *opsFlags) register(cmd, sub string, fs *flag.FlagSet) {
	switch cmd + " " + sub {
	case "parked list":
		fs.StringVar(&o.projection, "projection", "", "only this projection")
		fs.BoolVar(&o.asJSON, "json", false, "print JSON")
	case "erasures list":
		fs.BoolVar(&o.asJSON, "json", false, "print JSON")
	case "erasures apply":
		fs.StringVar(&o.by, "by", "", "who erases again, for the audit log (defaults to cli:$USER)")
	case "projections rewind":
		fs.StringVar(&o.by, "by", "", "who rewinds, for the audit log (defaults to cli:$USER)")
	case "parked replay":
		fs.StringVar(&o.projection, "projection", "", "only this projection (with --all)")
		fs.BoolVar(&o.all, "all", false, "replay every parked aggregate")
		fs.StringVar(&o.by, "by", "", "who replays, for the audit log (defaults to cli:$USER)")
	case "parked skip":
		fs.StringVar(&o.reason, "reason", "", "why the event is skipped (required)")
		fs.StringVar(&o.eventID, "event", "", "the id of the event to skip; must be the first waiting one")
		fs.StringVar(&o.by, "by", "", "who skips, for the audit log (defaults to cli:$USER)")
	}
	switch cmd {
	case "rebuild":
		fs.StringVar(&o.by, "by", "", "who rebuilds, for the audit log (defaults to cli:$USER)")
	case "verify":
		fs.StringVar(&o.projection, "projection", "", "only this projection")
		fs.DurationVar(&o.recheck, "recheck", 2*time.Second, "wait this long, then read differing aggregates once more (0: report at once)")
	}
}

// parseInterleaved parses flags that may follow positional arguments
// (app parked skip orders ID --reason ...) and returns the positionals.
// A bad flag is a usageError; -h or --help is flag.ErrHelp.
func parseInterleaved(fs *flag.FlagSet, rest []string) ([]string, error) {
	var pos []string
	for len(rest) > 0 {
		pos = append(pos, rest[0])
		if err := fs.Parse(rest[1:]); errors.Is(err, flag.ErrHelp) {
			return nil, err
		} else if err != nil {
			return nil, usageError{err.Error()}
		}
		rest = fs.Args()
	}
	return pos, nil
}

// cliList is how a list subcommand prints its items: with --json, one
// JSON array of the admin API's bodies (so that the CLI and the API show
// the same); otherwise a table, header first, and a footer line.
type cliList[V, T any] struct {
	body   func(V) T      // the admin API's body of an item
	header string         // the column names, tab-separated
	row    func(V) string // an item's columns, tab-separated
	footer string
}

func (l cliList[V, T]) print(stdout io.Writer, asJSON bool, items []V) error {
	if asJSON {
		out := make([]T, len(items))
		for i, v := range items {
			out[i] = l.body(v)
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, l.header)
	for _, v := range items {
		fmt.Fprintln(tw, l.row(v))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, l.footer)
	return err
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// openWired opens and migrates the databases and wires Hearth on them, for
// the operator's commands.
func openWired(ctx context.Context, cfg Config, log *slog.Logger) (databases, wiring, error) {
	// wire refuses to run without the master keys, but only once the
	// databases are open and migrated: a migration locks tables the running
	// instances use, so a command that cannot run must not get that far.
	if err := cfg.requireMasterKeys(); err != nil {
		return databases{}, wiring{}, err
	}
	dbs, err := openDatabases(ctx, cfg)
	if err != nil {
		return databases{}, wiring{}, err
	}
	if err := dbs.migrate(ctx, log); err != nil {
		dbs.close()
		return databases{}, wiring{}, err
	}
	w, err := wire(cfg, dbs, log)
	if err != nil {
		dbs.close()
		return databases{}, wiring{}, err
	}
	return dbs, w, nil
}

// parked runs `app parked list|replay|skip`.
func parked(ctx context.Context, cfg Config, log *slog.Logger, o opsFlags, sub string, args []string, getenv func(string) string, stdout io.Writer) error {
	verb := "parked " + sub
	by := actor(o.by, getenv)
	if err := ops.CheckActor(by); err != nil {
		return asUsage(flagError(verb, err, ""))
	}
	// The command line's mistakes, found before anything is opened, and
	// the use cases' refusals of its values (an unknown projection, a
	// missing reason) are usage errors that name the flag.
	usage := func(err error) error {
		var invalid *apperr.ValidationError
		if errors.As(err, &invalid) {
			return asUsage(flagError(verb, err, ""))
		}
		return err
	}
	if err := checkParkedArgs(o, sub, args); err != nil {
		return usage(err)
	}
	if o.projectionGiven && strings.TrimSpace(o.projection) == "" {
		// A script whose variable was empty: read as absent, it would
		// replay every projection's parked aggregates (the admin API
		// refuses projection= for the same reason).
		return usageError{verb + ": --projection must name a projection when given; leave it out for every projection"}
	}
	dbs, w, err := openWired(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dbs.close()
	op := w.operator
	switch sub {
	case "list":
		if len(args) > 0 {
			return usageError{fmt.Sprintf("parked list: unexpected arguments %q", args)}
		}
		list, err := op.ListParked(ctx, o.projection)
		if err != nil {
			return usage(err)
		}
		return cliList[ops.ParkedAggregate, httpport.ParkedBody]{
			body:   httpport.ParkedBodyOf,
			header: "PROJECTION\tAGGREGATE\tMERCHANT\tFIRST EVENT\tVERSION\tWAITING\tSINCE\tREASON",
			row: func(a ops.ParkedAggregate) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s", a.Projection, a.StreamID, a.MerchantID, a.FirstEventID,
					a.FirstVersion, a.Waiting, a.Since.Format(time.RFC3339), oneLine(a.Reason, 100))
			},
			footer: fmt.Sprintf("%d parked", len(list)),
		}.print(stdout, o.asJSON, list)
	case "replay":
		var results []ops.ReplayResult
		var stopped error
		switch {
		case o.all && len(args) == 0:
			// Each replay is a transaction of its own: on a failure part-way
			// (a lost connection, Ctrl-C), ReplayAll returns the replays done
			// before it, committed and audited, which are reported below.
			results, stopped = op.ReplayAll(ctx, o.projection, by)
			if stopped != nil && len(results) == 0 {
				return usage(stopped)
			}
		case !o.all && len(args) == 2 && o.projection == "":
			res, err := op.Replay(ctx, args[0], args[1], by)
			if err != nil {
				return usage(err)
			}
			results = append(results, res)
		default:
			return usageError{"parked replay: PROJECTION AGGREGATE_ID, or --all [--projection P]"}
		}
		if len(results) == 0 {
			fmt.Fprintln(stdout, "nothing is parked")
		}
		stillParked := 0
		for _, r := range results {
			if r.Unparked {
				fmt.Fprintf(stdout, "%s %s: applied %d, unparked\n", r.Projection, r.StreamID, r.Applied)
				continue
			}
			stillParked++
			fmt.Fprintf(stdout, "%s %s: applied %d, still parked with %d waiting: %s\n", r.Projection, r.StreamID, r.Applied, r.Waiting, oneLine(r.Error, 200))
		}
		if stopped != nil {
			return fmt.Errorf("parked replay: stopped after %d replays (above): %w", len(results), stopped)
		}
		if stillParked > 0 {
			return fmt.Errorf("%d aggregates are still parked", stillParked)
		}
		return nil
	case "skip":
		if len(args) != 2 {
			return usageError{"parked skip: PROJECTION AGGREGATE_ID --reason WHY [--event EVENT_ID] [--by WHO]"}
		}
		res, err := op.Skip(ctx, ops.Skip{Projection: args[0], StreamID: args[1], EventID: o.eventID, By: by, Reason: o.reason})
		if err != nil {
			return usage(err)
		}
		fmt.Fprintf(stdout, "%s %s: skipped version %d (%s, event %s) by %s: %s\n", res.Projection, res.StreamID, res.Version,
			res.Type, res.EventID, res.SkippedBy, res.Reason)
		if res.Unparked {
			fmt.Fprintln(stdout, "nothing else waits: unparked")
		} else {
			fmt.Fprintf(stdout, "%d events still wait: app parked replay %s %s\n", res.Waiting, res.Projection, res.StreamID)
		}
		return nil
	}
	return usageError{fmt.Sprintf("parked: unknown subcommand %q; list, replay or skip", sub)}
}

// checkParkedArgs checks what the command line of `app parked sub` says
// before anything is opened (opening applies pending migrations, which a
// slip must not do): the arguments' count, the skip's reason, the
// aggregate's and the event's ids. The projection an argument names is
// the use case's to check, once open.
func checkParkedArgs(o opsFlags, sub string, args []string) error {
	switch {
	case sub == "list" && len(args) > 0:
		return usageError{fmt.Sprintf("parked list: unexpected arguments %q", args)}
	case sub == "replay" && !(o.all && len(args) == 0) && !(!o.all && len(args) == 2 && o.projection == ""):
		return usageError{"parked replay: PROJECTION AGGREGATE_ID, or --all [--projection P]"}
	case sub == "skip" && len(args) != 2:
		return usageError{"parked skip: PROJECTION AGGREGATE_ID --reason WHY [--event EVENT_ID] [--by WHO]"}
	case sub == "skip" && strings.TrimSpace(o.reason) == "":
		return apperr.Invalid("reason", "is required: say why the event is skipped")
	}
	if (sub == "replay" || sub == "skip") && len(args) == 2 {
		if !uuid.Valid(args[1]) {
			return apperr.Invalid("id", "must be a UUID, got %q", args[1])
		}
	}
	if o.eventID != "" && !uuid.Valid(o.eventID) {
		return apperr.Invalid("event_id", "must be a UUID, got %q", o.eventID)
	}
	return nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// differencesError is `app verify` finding differences: exit status 1.
type differencesError struct{ n int }

func (e differencesError) Error() string {
	return fmt.Sprintf("verify: %d differences between the read model and the event store", e.n)
}

// verify runs `app verify`: every difference on stdout, one per line,
// progress on stderr when it is a terminal.
func verify(ctx context.Context, cfg Config, log *slog.Logger, o opsFlags, stdout, stderr io.Writer) error {
	dbs, w, err := openWired(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dbs.close()
	v := ops.Verification{RecheckAfter: o.recheck}
	if o.projection != "" {
		v.Projections = []string{o.projection}
	}
	if isTerminal(stderr) {
		v.Progress = stderr
	}
	report, err := w.operator.Verify(ctx, v)
	if err != nil {
		return err
	}
	n := 0
	for _, p := range report.Projections {
		for _, d := range p.Differences {
			fmt.Fprintln(stdout, d)
		}
		n += len(p.Differences)
		fmt.Fprintf(stdout, "verify %s: %d streams, %d events, %d differences\n", p.Projection, p.Streams, p.Events, len(p.Differences))
	}
	if n > 0 {
		return differencesError{n: n}
	}
	return nil
}

// rebuild runs `app rebuild PROJECTION`: progress with rate and ETA on
// stderr (in place on a terminal, a line every 5 s otherwise, a log record
// with LOG_FORMAT=json); Ctrl-C cancels it and drops the shadow table. The
// use case records the start, and a cancel, in the audit log.
func rebuild(ctx context.Context, cfg Config, log *slog.Logger, o opsFlags, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return usageError{"rebuild: name one projection: " + strings.Join(readmodel.Projections(), ", ")}
	}
	if !slices.Contains(readmodel.Projections(), args[0]) {
		return usageError{fmt.Sprintf("rebuild: unknown projection %q; one of %s", args[0], strings.Join(readmodel.Projections(), ", "))}
	}
	by := actor(o.by, getenv)
	if err := ops.CheckActor(by); err != nil {
		return asUsage(flagError("rebuild", err, ""))
	}
	dbs, w, err := openWired(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dbs.close()
	term := isTerminal(stderr)
	var lastLine time.Time
	lastPhase := ""
	p, err := w.operator.Rebuild(ctx, args[0], by, func(p ops.RebuildProgress) {
		line := progressText(p)
		switch {
		case term:
			fmt.Fprint(stderr, "\r"+line+"\033[K")
		case p.Phase != lastPhase || time.Since(lastLine) >= 5*time.Second:
			if cfg.LogFormat == "json" { // a pipeline reading JSON lines would drop or split a line of text
				log.Info("rebuild progress", "projection", p.Projection, "phase", p.Phase, "events", p.Events, "total", p.Total,
					"rows", p.Rows, "events_per_second", math.Round(p.Rate), "eta", p.ETA)
			} else {
				fmt.Fprintln(stderr, line)
			}
			lastLine = time.Now()
		}
		lastPhase = p.Phase
	})
	if term {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rebuild %s: done, %d rows from %d events in %s\n", p.Projection, p.Rows, p.Events,
		p.FinishedAt.Sub(p.StartedAt).Round(time.Millisecond))
	return nil
}

func progressText(p ops.RebuildProgress) string {
	pct := int64(100)
	if p.Total > 0 {
		pct = min(100, p.Events*100/p.Total)
	}
	s := fmt.Sprintf("rebuild %s: %s %d/%d events (%d%%), %d rows, %.0f events/s", p.Projection, p.Phase, p.Events, p.Total, pct, p.Rows, p.Rate)
	if p.ETA != "" {
		s += ", ETA " + p.ETA
	}
	return s
}
