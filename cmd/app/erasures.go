package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"hearth/adapters/vault"
	"hearth/app/ops"
	"hearth/internal/advisory"
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
