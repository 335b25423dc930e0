// Package ops holds what the operator's tools report: parked aggregates,
// replays, skips and rebuilds. Plain structs, shared by the adapters that
// produce them and the ports (HTTP, CLI) that show them.
package ops

import "time"

// ParkedAggregate is one aggregate whose events a projection holds back
// because one of them exhausted its retry budget.
type ParkedAggregate struct {
	Projection    string    `json:"projection"`
	StreamID      string    `json:"stream_id"`
	StreamType    string    `json:"stream_type"`
	MerchantID    string    `json:"merchant_id"`
	Reason        string    `json:"reason"`
	FirstEventID  string    `json:"first_event_id"`
	FirstVersion  int       `json:"first_version"`
	Waiting       int       `json:"waiting"`
	Since         time.Time `json:"since"`
	Attempts      int       `json:"attempts"`
	LastAttemptAt time.Time `json:"last_attempt_at"`
	// Events are the waiting events in version order (detail only).
	Events []ParkedEvent `json:"events,omitempty"`
}

// ParkedEvent is one waiting event (its payload is not shown: it is CRM
// data).
type ParkedEvent struct {
	EventID  string    `json:"event_id"`
	Type     string    `json:"type"`
	Version  int       `json:"version"`
	ParkedAt time.Time `json:"parked_at"`
}

// ReplayResult is what replaying one parked aggregate did.
type ReplayResult struct {
	Projection string `json:"projection"`
	StreamID   string `json:"stream_id"`
	// Applied is how many waiting events were applied (in version order).
	Applied int `json:"applied"`
	// Unparked is true when every waiting event applied; the aggregate
	// flows again.
	Unparked bool `json:"unparked"`
	// Waiting is how many events still wait (0 when unparked).
	Waiting int `json:"waiting"`
	// Error is why it is still parked.
	Error string `json:"error,omitempty"`
}

// SkipResult is what skipping one event did.
type SkipResult struct {
	Projection string `json:"projection"`
	StreamID   string `json:"stream_id"`
	EventID    string `json:"event_id"`
	Version    int    `json:"version"`
	Type       string `json:"type"`
	SkippedBy  string `json:"skipped_by"`
	Reason     string `json:"reason"`
	// Waiting is how many events still wait behind the skipped one; replay
	// them next. When none wait the aggregate is unparked.
	Waiting  int  `json:"waiting"`
	Unparked bool `json:"unparked"`
}

// RebuildProgress is the state of a projection rebuild.
type RebuildProgress struct {
	Projection string    `json:"projection"`
	Phase      string    `json:"phase"` // fold, catch_up, swap, done, failed, cancelled
	Events     int64     `json:"events"`
	Total      int64     `json:"total"`
	Rows       int64     `json:"rows"`
	Rate       float64   `json:"events_per_second"`
	ETA        string    `json:"eta,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Error      string    `json:"error,omitempty"`
}
