// Package ops holds the operator's use cases (Operator): parked
// aggregates (list, replay, skip), projection rebuilds (start, progress,
// cancel), verification of the read models, and the admin audit log, which
// every change records itself in. It declares what it needs from the
// adapters (Parking, Rebuilds, Verifier, AuditLog); the ports (the admin
// API, the CLI) call it and show its results in their own formats.
package ops

import (
	"fmt"
	"io"
	"time"
)

// ParkedAggregate is one aggregate whose events a projection holds back
// because one of them exhausted its retry budget.
type ParkedAggregate struct {
	Projection    string
	StreamID      string
	StreamType    string
	MerchantID    string
	Reason        string
	FirstEventID  string
	FirstVersion  int
	Waiting       int
	Since         time.Time
	Attempts      int
	LastAttemptAt time.Time
	// Events are the waiting events in version order (detail only).
	Events []ParkedEvent
}

// ParkedEvent is one waiting event (its payload is not shown: it is CRM
// data).
type ParkedEvent struct {
	EventID  string
	Type     string
	Version  int
	ParkedAt time.Time
}

// ReplayResult is what replaying one parked aggregate did.
type ReplayResult struct {
	Projection string
	StreamID   string
	// Applied is how many waiting events were applied (in version order),
	// with the missing ones of a gap that replay filled in from the events
	// table.
	Applied int
	// Unparked is true when every waiting event applied; the aggregate
	// flows again.
	Unparked bool
	// Waiting is how many events still wait (0 when unparked).
	Waiting int
	// Error is why it is still parked.
	Error string
}

// Skip is a skip of the first waiting event of a parked aggregate.
type Skip struct {
	Projection string
	StreamID   string
	// EventID, when not empty, must name the first waiting event.
	EventID string
	// By is who skips it, for the audit log; Reason why. Both are
	// required.
	By     string
	Reason string
}

// SkipResult is what skipping one event did.
type SkipResult struct {
	Projection string
	StreamID   string
	EventID    string
	Version    int
	Type       string
	SkippedBy  string
	Reason     string
	// Waiting is how many events still wait behind the skipped one; replay
	// them next. When none wait the aggregate is unparked.
	Waiting  int
	Unparked bool
}

// RebuildProgress is the state of a projection rebuild.
type RebuildProgress struct {
	Projection string
	Phase      string // fold, catch_up, swap, done, failed, cancelled
	Events     int64
	Total      int64
	Rows       int64
	// Rate is in events per second.
	Rate       float64
	ETA        string
	StartedAt  time.Time
	FinishedAt time.Time
	Error      string
}

// Verification is a comparison of the read models with the event store.
type Verification struct {
	// Projections limits it to these projections; empty: all of them.
	Projections []string
	// RecheckAfter is how long to wait before reading the aggregates that
	// differ once more (both sides afresh), so that events still in flight
	// through a live projection are not reported. 0 reports at once.
	RecheckAfter time.Duration
	// Progress, when set, receives a progress line (rewritten in place
	// with \r) while streams are read; the CLI passes stderr when it is a
	// terminal.
	Progress io.Writer
}

// VerifyReport is what a verification found, per projection.
type VerifyReport struct {
	Projections []ProjectionReport
}

// ProjectionReport is the verification of one projection.
type ProjectionReport struct {
	Projection  string
	Streams     int64
	Events      int64
	Differences []Difference
}

// Differences returns every difference found.
func (r VerifyReport) Differences() []Difference {
	var out []Difference
	for _, p := range r.Projections {
		out = append(out, p.Differences...)
	}
	return out
}

// Difference is one way a read-model row or its change log disagrees with
// the fold of its events.
type Difference struct {
	Projection  string
	AggregateID string
	// What differs: a field name, "row", "change_log", "change_log vN" or
	// "change_log after".
	What string
	// ReadModel is what the table or the change log holds.
	ReadModel string
	// EventLog is what the fold of the events says.
	EventLog string
}

func (d Difference) String() string {
	return fmt.Sprintf("%s %s %s: read model %s, event log %s", d.Projection, d.AggregateID, d.What, d.ReadModel, d.EventLog)
}
