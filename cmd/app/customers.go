package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	httpport "hearth/ports/http"
)

// customerFlags are the flags of `app customers export|erase` and `app
// staff export|erase`.
type customerFlags struct {
	merchant, by, confirm string
}

func (c *customerFlags) register(cmd, sub string, fs *flag.FlagSet) {
	if cmd != "customers" && cmd != "staff" {
		return
	}
	fs.StringVar(&c.merchant, "merchant", "", "the merchant (a name; required)")
	fs.StringVar(&c.by, "by", "", "who does it, for the audit log (defaults to cli:$USER)")
	// erase's alone: on export it would be ignored without a word.
	if sub == "erase" {
		fs.StringVar(&c.confirm, "confirm", "", "the id again, to confirm (an erasure cannot be undone)")
	}
}

// openForMerchant checks --by, opens Hearth and finds the merchant --merchant
// names, for the commands on one merchant's data (name is the command, for
// its errors). The caller closes dbs.
func openForMerchant(ctx context.Context, cfg Config, log *slog.Logger, name string, c customerFlags, getenv func(string) string) (by, merchantID string, dbs databases, w wiring, err error) {
	by = actor(c.by, getenv)
	if err := ops.CheckActor(by); err != nil {
		return "", "", databases{}, wiring{}, asUsage(flagError(name, err, ""))
	}
	if dbs, w, err = openWired(ctx, cfg, log); err != nil {
		return "", "", databases{}, wiring{}, err
	}
	merchantID, err = w.keys.MerchantID(ctx, c.merchant)
	if errors.Is(err, apperr.ErrNotFound) {
		err = fmt.Errorf("%s: no merchant named %q", name, c.merchant)
	} else if err != nil {
		err = fmt.Errorf("%s: %w", name, err)
	}
	if err != nil {
		dbs.close()
		return "", "", databases{}, wiring{}, err
	}
	return by, merchantID, dbs, w, nil
}

// eraseSubject runs `app customers erase` and `app staff erase`: the use
// case POST /v1/customers/{id}/erase runs, recorded as done by --by.
func eraseSubject(ctx context.Context, cfg Config, log *slog.Logger, cmd string, c customerFlags, args []string, getenv func(string) string, stdout io.Writer) error {
	name, subjectType := cmd+" erase", event.SubjectCustomer
	if cmd == "staff" {
		subjectType = event.SubjectStaffMember
	}
	if len(args) != 1 || c.merchant == "" {
		return usageError{name + ": --merchant NAME ID --confirm ID [--by WHO]"}
	}
	// The use case checks both again; checked here too, so that a command
	// line that cannot erase anything opens (and migrates) no database.
	id, ok := uuid.Parse(args[0])
	if !ok {
		// Not repeated: the person's name given for their id is the likely
		// slip, and what the command prints may end in a log.
		return asUsage(flagError(name, apperr.Invalid("id", "must be a UUID, the %s's id (not their name)", strings.ReplaceAll(subjectType, "_", " ")), ""))
	}
	if confirm, ok := uuid.Parse(c.confirm); !ok || confirm != id {
		return asUsage(flagError(name, apperr.Invalid("confirm", "must repeat the id of the %s to erase (%s): erasure cannot be undone",
			strings.ReplaceAll(subjectType, "_", " "), id), ""))
	}
	by, merchantID, dbs, w, err := openForMerchant(ctx, cfg, log, name, c, getenv)
	if err != nil {
		return err
	}
	defer dbs.close()
	e, err := w.erasures.Erase(ctx, ops.ErasureRequest{By: by, MerchantID: merchantID, SubjectType: subjectType,
		SubjectID: args[0], Confirm: c.confirm})
	if errors.Is(err, apperr.ErrNotFound) {
		return fmt.Errorf("%s: merchant %q has no %s %s", name, c.merchant, strings.ReplaceAll(subjectType, "_", " "), args[0])
	}
	if err != nil {
		return flagError(name, err, "")
	}
	fmt.Fprintf(stdout, "erased %s %s (first erased at %s); %d aggregates marked now\n", strings.ReplaceAll(subjectType, "_", " "),
		e.SubjectID, e.ErasedAt.Format(time.RFC3339), e.Streams)
	// The operator must know whether the erasure is complete: a second
	// pass left pending is run by the erasure worker of a serving instance
	// (or the next erase run, below), and the metric
	// hearth_erasure_second_passes_pending counts it until then.
	if e.SecondPassPending {
		fmt.Fprintf(stdout, "second pass pending (due %s; %v): the erasure worker of a running instance, or the next erase run, runs it\n",
			e.SecondPassDue.Format(time.RFC3339), e.SecondPassError)
	} else {
		fmt.Fprintf(stdout, "second pass done: the erasure is complete\n")
	}
	// Second passes left by earlier runs (interrupted, or a process that
	// died) are run here too, so that a deployment that erases only from
	// the CLI completes them as well.
	ran, err := w.erasures.RunDue(ctx)
	if ran > 0 {
		fmt.Fprintf(stdout, "ran %d second passes left pending by earlier erasures\n", ran)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// exportSubject runs `app customers export --merchant NAME ID` and `app
// staff export`: the document GET /v1/customers/{id}/export (GET
// /v1/staff/{id}/export) answers, from the same use case, on stdout; the
// export is recorded in the audit log as done by --by.
func exportSubject(ctx context.Context, cfg Config, log *slog.Logger, cmd string, c customerFlags, args []string, getenv func(string) string, stdout io.Writer) error {
	name, subject, idName := cmd+" export", "customer", "CUSTOMER_ID"
	if cmd == "staff" {
		subject, idName = "staff member", "STAFF_ID"
	}
	if len(args) != 1 || c.merchant == "" {
		return usageError{fmt.Sprintf("%s: --merchant NAME %s [--by WHO]", name, idName)}
	}
	if !uuid.Valid(args[0]) { // before any database is opened; the use case checks it too
		// Not repeated, as in eraseSubject: it may be the person's name.
		return asUsage(flagError(name, apperr.Invalid("id", "must be a UUID, the %s's id (not their name)", subject), ""))
	}
	by, merchantID, dbs, w, err := openForMerchant(ctx, cfg, log, name, c, getenv)
	if err != nil {
		return err
	}
	defer dbs.close()
	var doc any
	if cmd == "staff" {
		var x ops.StaffExport
		x, err = w.staffExports.ExportStaffMember(ctx, ops.StaffExportRequest{By: by, MerchantID: merchantID, StaffID: args[0]})
		doc = httpport.StaffExportBodyOf(x)
	} else {
		var x ops.CustomerExport
		x, err = w.exports.ExportCustomer(ctx, ops.ExportRequest{By: by, MerchantID: merchantID, CustomerID: args[0]})
		doc = httpport.CustomerExportBodyOf(x)
	}
	if errors.Is(err, apperr.ErrNotFound) {
		return fmt.Errorf("%s: merchant %q has no %s %s", name, c.merchant, subject, args[0])
	}
	if err != nil {
		return flagError(name, err, "")
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
