package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"

	"hearth/adapters/pubsub"
	"hearth/adapters/vault"
	"hearth/adapters/webhooks"
	"hearth/app/ops"
	"hearth/internal/advisory"
	"hearth/internal/database"
	"hearth/leader"
)

// erasureUnit is the erasure worker as a leadership unit (advisory.Erasures):
// one instance at a time runs the second passes of erasures left pending,
// whichever instance (or CLI run) erased. It writes through the shared
// event-store pool, unfenced: a second pass is all or nothing, under the
// subject's lock, and one run twice (by a leader cut off meanwhile) finds
// nothing left and clears no record but its own.
func erasureUnit(w wiring, log *slog.Logger) leader.Unit {
	return leader.Unit{Name: advisory.Erasures,
		Lead: func(ctx context.Context, term int64) error {
			return leadErasures(ctx, w.erasures, vault.CacheFor, nil, log.With("lock", advisory.Erasures, "term", term))
		}}
}

// leadErasures runs the second passes due now, then again every interval,
// until ctx ends. round, when set, is told each round's outcome (tests).
func leadErasures(ctx context.Context, x *ops.Erasures, every time.Duration, round func(ran int, err error), log *slog.Logger) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		ran, err := x.RunDue(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			log.ErrorContext(ctx, "erasure second passes", "error", err, "ran", ran) // the next round retries
		} else if ran > 0 {
			log.InfoContext(ctx, "ran erasure second passes left pending", "ran", ran)
		}
		if round != nil {
			round(ran, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// pendingErasureBody is one line of `app erasures list --json`.
type pendingErasureBody struct {
	SubjectType   string    `json:"subject_type"`
	SubjectID     string    `json:"subject_id"`
	MerchantID    string    `json:"merchant_id"`
	RequestedBy   string    `json:"requested_by"`
	CorrelationID string    `json:"correlation_id"`
	Due           time.Time `json:"second_pass_due"`
}

// erasures runs `app erasures list|run`: the erasures not complete yet,
// and their due second passes run now. An operator needs both where no
// instance runs the erasure worker (every instance MODE=api: run it from a
// timer), and to answer the overdue alert with names, not a count.
func erasures(ctx context.Context, cfg Config, log *slog.Logger, sub string, o opsFlags, stdout io.Writer) error {
	dbs, w, err := openWired(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dbs.close()
	if sub == "run" {
		// RunDue runs a batch at a time; the next batch follows until none
		// is left due, or one fails (its record stays, for the next run).
		total := 0
		for {
			ran, err := w.erasures.RunDue(ctx)
			total += ran
			if err != nil {
				fmt.Fprintf(stdout, "ran %d second passes\n", total)
				return fmt.Errorf("erasures run: %w", err)
			}
			if ran == 0 {
				break
			}
		}
		fmt.Fprintf(stdout, "ran %d second passes\n", total)
	}
	pending, err := w.erasures.Pending(ctx)
	if err != nil {
		return fmt.Errorf("erasures %s: %w", sub, err)
	}
	footer := fmt.Sprintf("%d erasures not complete: each is complete once its second pass has run (app erasures run runs those due)", len(pending))
	if sub == "run" {
		footer = fmt.Sprintf("%d erasures not complete (their second passes are not due yet)", len(pending))
	}
	return cliList[ops.PendingErasure, pendingErasureBody]{
		body: func(p ops.PendingErasure) pendingErasureBody {
			r := p.Request
			return pendingErasureBody{SubjectType: r.SubjectType, SubjectID: r.SubjectID, MerchantID: r.MerchantID,
				RequestedBy: r.By, CorrelationID: r.CorrelationID, Due: p.Due}
		},
		header: "SUBJECT TYPE\tSUBJECT\tMERCHANT\tREQUESTED BY\tSECOND PASS DUE",
		row: func(p ops.PendingErasure) string {
			r := p.Request
			return strings.Join([]string{r.SubjectType, r.SubjectID, r.MerchantID, r.By, p.Due.Format(time.RFC3339)}, "\t")
		},
		footer: footer,
	}.print(stdout, o.asJSON, pending)
}

// erasuresSchema names the document of `app erasures export`, which `app
// erasures apply` reads.
const erasuresSchema = "hearth.erasures/1"

// erasureListBody is the document of `app erasures export`: every erasure
// on record, by ids only (no personal data), so that it can be kept
// beside the backups and outlive a restore.
type erasureListBody struct {
	Schema     string              `json:"schema"`
	ExportedAt time.Time           `json:"exported_at"`
	Erasures   []erasedSubjectBody `json:"erasures"`
}

type erasedSubjectBody struct {
	SubjectType string    `json:"subject_type"`
	SubjectID   string    `json:"subject_id"`
	MerchantID  string    `json:"merchant_id"`
	ErasedAt    time.Time `json:"erased_at"`
}

// erasuresExport runs `app erasures export`: the erasures on record, as
// one JSON document on stdout.
func erasuresExport(ctx context.Context, cfg Config, log *slog.Logger, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("erasures export: unexpected arguments %q (it writes to standard output)", args)}
	}
	// It runs from a timer beside the backups and reads ids only: no
	// master keys (that host need not hold the keys to every customer's
	// data) and no migration (a newer binary there must not upgrade the
	// schema at a time nobody chose). So the event store is opened alone.
	es, err := database.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer es.Close()
	var recorded bool
	if err := es.QueryRowContext(ctx, `SELECT to_regclass('erased_subjects') IS NOT NULL`).Scan(&recorded); err != nil {
		return fmt.Errorf("erasures export: %w", err)
	}
	if !recorded {
		return errors.New("erasures export: the database holds no erasure records: it is not Hearth's, or not migrated yet (app migrate, or start Hearth, migrates it)")
	}
	store, err := pubsub.NewStore(es, nil, nil)
	if err != nil {
		return err
	}
	erasures, err := ops.NewErasures(store, vault.CacheFor)
	if err != nil {
		return err
	}
	records, err := ops.NewErasureRecords(store, erasures)
	if err != nil {
		return err
	}
	list, err := records.Export(ctx)
	if err != nil {
		return fmt.Errorf("erasures export: %w", err)
	}
	doc := erasureListBody{Schema: erasuresSchema, ExportedAt: time.Now().UTC(), Erasures: make([]erasedSubjectBody, len(list))}
	for i, e := range list {
		doc.Erasures[i] = erasedSubjectBody{SubjectType: e.SubjectType, SubjectID: e.SubjectID, MerchantID: e.MerchantID, ErasedAt: e.ErasedAt}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// readErasureList reads and checks the document of `app erasures export`
// in file: strictly, since a list read wrong would erase the wrong people
// or leave the right ones.
func readErasureList(file string) ([]ops.ErasedSubject, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var doc struct {
		Schema     string     `json:"schema"`
		ExportedAt *time.Time `json:"exported_at"`
		Erasures   []struct {
			SubjectType string     `json:"subject_type"`
			SubjectID   string     `json:"subject_id"`
			MerchantID  string     `json:"merchant_id"`
			ErasedAt    *time.Time `json:"erased_at"`
		} `json:"erasures"`
	}
	if err := dec.Decode(&doc); err != nil {
		return nil, erasureListTypeError(file, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: more data after the document", file)
	}
	if doc.Schema != erasuresSchema {
		return nil, fmt.Errorf("%s: schema: must be %q, got %q (the document app erasures export writes)", file, erasuresSchema, doc.Schema)
	}
	if doc.Erasures == nil {
		return nil, fmt.Errorf("%s: erasures: required (a list, empty when nothing was erased)", file)
	}
	out := make([]ops.ErasedSubject, len(doc.Erasures))
	for i, e := range doc.Erasures {
		out[i] = ops.ErasedSubject{SubjectType: e.SubjectType, SubjectID: e.SubjectID, MerchantID: e.MerchantID}
		if e.ErasedAt != nil {
			out[i].ErasedAt = e.ErasedAt.UTC()
		}
	}
	return out, nil
}

// erasureListTypeError is the decoder's error in the operator's words: a
// value of the wrong JSON type (the array `app erasures list --json` prints
// given for the export's object, a number for an id) is described by
// encoding/json through the Go type it decodes into, an anonymous struct
// the operator never wrote.
func erasureListTypeError(file string, err error) error {
	var typed *json.UnmarshalTypeError
	if !errors.As(err, &typed) {
		return fmt.Errorf("read %s: %w", file, err)
	}
	want := map[reflect.Kind]string{reflect.String: "a string", reflect.Slice: "an array", reflect.Struct: "an object", reflect.Pointer: "a time such as 2030-01-02T15:04:05Z"}[typed.Type.Kind()]
	got := cmpOr(map[string]string{"array": "an array", "object": "an object", "string": "a string", "bool": "a boolean"}[typed.Value], "a "+typed.Value)
	if strings.HasPrefix(typed.Value, "number") {
		got = "a number"
	}
	if typed.Field == "" {
		return fmt.Errorf("%s: must be the object app erasures export writes, not %s", file, got)
	}
	return fmt.Errorf("%s: %s: must be %s, not %s", file, typed.Field, cmpOr(want, "of another type"), got)
}

// erasuresApply runs `app erasures apply FILE`: after a restore, every
// subject FILE lists (an export taken after the backup) that the restored
// database holds and has not recorded erased is erased again; the rest is
// counted. Nothing is erased when the list cannot be trusted.
func erasuresApply(ctx context.Context, cfg Config, log *slog.Logger, o opsFlags, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 1 {
		return usageError{"erasures apply: FILE [--by WHO]: one file, written by app erasures export"}
	}
	by := actor(o.by, getenv)
	if err := ops.CheckActor(by); err != nil {
		return asUsage(fmt.Errorf("erasures apply: --by: %w", err))
	}
	// Read before any database is opened: a bad file changes nothing.
	list, err := readErasureList(args[0])
	if err != nil {
		return fmt.Errorf("erasures apply: %w", err)
	}
	dbs, w, err := openWired(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dbs.close()
	r, err := w.erasureRecords.Reapply(ctx, by, list)
	for _, e := range r.Erased {
		fmt.Fprintf(stdout, "erased again: %s %s of merchant %s\n", strings.ReplaceAll(e.SubjectType, "_", " "), e.SubjectID, e.MerchantID)
	}
	for _, e := range r.Absent {
		fmt.Fprintf(stdout, "not in this database: %s %s of merchant %s (created after the backup: nothing to erase)\n",
			strings.ReplaceAll(e.SubjectType, "_", " "), e.SubjectID, e.MerchantID)
	}
	if err != nil {
		// No summary: a list refused (or stopped part-way) was not
		// applied, and the lines above name what was erased before.
		return fmt.Errorf("erasures apply %s: %w", args[0], err)
	}
	fmt.Fprintf(stdout, "%d erased again, %d already erased, %d not in this database\n", len(r.Erased), r.AlreadyErased, len(r.Absent))
	if r.SecondPassesPending > 0 {
		fmt.Fprintf(stdout, "%d second passes pending: the erasure worker of a running instance, or app erasures run, runs them (app erasures list lists them)\n",
			r.SecondPassesPending)
	}
	return nil
}

// projectionsRewind runs `app projections rewind`: after a read-model
// database is restored from a backup older than the event store's offsets
// (two databases), each projection reads its topic again from the oldest
// message retention kept, so that the read model gets what its backup
// missed. Refused while an instance runs the projections.
func projectionsRewind(ctx context.Context, cfg Config, log *slog.Logger, o opsFlags, getenv func(string) string, stdout io.Writer) error {
	by := actor(o.by, getenv)
	if err := ops.CheckActor(by); err != nil {
		return asUsage(fmt.Errorf("projections rewind: --by: %w", err))
	}
	dbs, w, err := openWired(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dbs.close()
	consumers := make([]pubsub.Consumer, len(w.projections))
	for i, p := range w.projections {
		consumers[i] = pubsub.Consumer{Group: p.Name, Topic: p.Topic}
	}
	rewound, err := pubsub.RewindConsumers(ctx, dbs.es.DB, advisory.Projections, consumers)
	if err != nil {
		return fmt.Errorf("projections rewind: %w", err)
	}
	details := map[string]any{}
	for _, r := range rewound {
		if !r.Found {
			fmt.Fprintf(stdout, "%s has no offset yet: it reads %s from the start\n", r.Group, r.Topic)
			continue
		}
		fmt.Fprintf(stdout, "rewound %s to (transaction %s, offset %d) of %s\n", r.Group, r.TransactionID, r.Offset, r.Topic)
		details[r.Group] = map[string]any{"transaction_id": r.TransactionID, "offset": r.Offset}
	}
	// The leadership terms went back with the read model, while the event
	// store's copies of webhook delivery's and the visit generator's moved
	// on: raised to them, those units lead at once rather than one refused
	// term at a time.
	raised, termsErr := webhooks.CatchUpTerms(ctx, dbs.es.DB, dbs.rm.DB)
	for _, r := range raised {
		fmt.Fprintf(stdout, "raised the term of %s from %d to %d, the event store's\n", r.Name, r.From, r.To)
		details["term "+r.Name] = map[string]any{"from": r.From, "to": r.To}
	}
	// Recorded after the commit, as a rebuild is: the rewind is done
	// whatever becomes of its entry, which is then logged with the error.
	entry := ops.AuditEntry{Actor: by, Action: ops.ActionProjectionsRewind, Target: "projections", Details: details}
	if err := w.refdata.RecordAudit(ctx, entry); err != nil {
		log.ErrorContext(ctx, "record the projections' rewind in the audit log", "error", err, "details", details)
	}
	if termsErr != nil { // the rewind stands; running it again raises the terms left
		return fmt.Errorf("projections rewind: %w", termsErr)
	}
	fmt.Fprintln(stdout, "start the instances: each projection applies again what its topic holds after that position (app verify checks the result)")
	return nil
}
