// Package apperr holds the error types that cross the boundary between the
// application and its ports. The HTTP port maps each to a problem+json
// answer; nothing here knows about HTTP.
package apperr

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrNotFound means the entity does not exist for the caller's merchant. A
// foreign merchant's id is reported exactly like a missing one.
var ErrNotFound = errors.New("not found")

// ErrForbidden means the caller's key is known but its role may not do this.
var ErrForbidden = errors.New("forbidden")

// FieldError names one offending input field.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
	// omitted counts, on the entry after MaxFieldErrors, the errors that
	// Fields left out from its field on.
	omitted int
}

// ValidationError is input that breaks a field rule (required, range,
// format). It answers 422 and lists every offending field.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// FieldNames are the names of the fields in error, in order.
func (e *ValidationError) FieldNames() []string {
	out := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		out[i] = f.Field
	}
	return out
}

// Invalid returns a ValidationError for one field.
func Invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Fields: []FieldError{{Field: field, Message: Message(format, args...)}}}
}

// MaxFieldErrors bounds the field errors Fields lists. A body of 1 MiB may
// hold a hundred thousand wrong items of an array, each an error of its
// own whose message may list what the field takes: the answer (and the
// error's text, which the detail repeats) would be a hundred times the
// request, built in memory. Past the bound Fields lists one entry more,
// naming the first field left out and how many errors it left out.
const MaxFieldErrors = 100

// Fields collects field errors; Err returns nil when there are none.
type Fields []FieldError

// Add records a field error; past MaxFieldErrors, it only counts it.
func (f *Fields) Add(field, format string, args ...any) {
	if n := len(*f); n >= MaxFieldErrors {
		if n == MaxFieldErrors {
			*f = append(*f, FieldError{Field: field})
		}
		(*f)[MaxFieldErrors].omitted++
		return
	}
	*f = append(*f, FieldError{Field: field, Message: Message(format, args...)})
}

// MaxQuoted bounds, in bytes, a value a message quotes. A message quotes
// (%q) the input it refuses so that the client sees what was wrong; but a
// body may be 1 MiB and a path or a query 64 KiB, and a mistaken value of
// that size sent back (in the detail and again in errors) helps nobody and
// fills the logs and caches that keep answers.
const MaxQuoted = 256

// Message is fmt.Sprintf for a field's message: a string it quotes (%q)
// is cut to MaxQuoted bytes, on a rune's boundary, and says how many bytes
// were left out. Other verbs (the server's own lists, %s) are as Sprintf's.
func Message(format string, args ...any) string {
	clipped := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > MaxQuoted {
			a = quotable(s)
		}
		clipped[i] = a
	}
	return fmt.Sprintf(format, clipped...)
}

// Quote is strconv.Quote of s cut as Message cuts a %q value.
func Quote(s string) string { return fmt.Sprintf("%q", quotable(s)) }

// Clip is s cut as Message cuts a %q value, unquoted: for a name the
// client gave (an unknown field's) that a problem names.
func Clip(s string) string {
	head, more := clip(s)
	if more == 0 {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes more)", head, more)
}

// clip is s cut to at most MaxQuoted bytes on a rune's boundary, and how
// many bytes were cut.
func clip(s string) (head string, more int) {
	if len(s) <= MaxQuoted {
		return s, 0
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], len(s) - cut
}

// quotable is a string that, quoted, is cut to MaxQuoted bytes.
type quotable string

func (s quotable) Format(f fmt.State, verb rune) {
	head, more := clip(string(s))
	if verb != 'q' || more == 0 {
		fmt.Fprintf(f, fmt.FormatString(f, verb), string(s))
		return
	}
	fmt.Fprintf(f, "%q… (%d bytes more)", head, more)
}

// List returns the collected errors as a refusal lists them: past
// MaxFieldErrors, the last entry says how many were left out.
func (f Fields) List() []FieldError {
	if len(f) > MaxFieldErrors {
		last := &f[MaxFieldErrors]
		last.Message = fmt.Sprintf("%d more errors, from this field on, are not listed (a refusal lists at most %d)",
			last.omitted, MaxFieldErrors)
	}
	return f
}

// Omitted is how many errors Add left out (past MaxFieldErrors).
func (f Fields) Omitted() int {
	if len(f) > MaxFieldErrors {
		return f[MaxFieldErrors].omitted
	}
	return 0
}

// Err returns the collected errors as a *ValidationError, or nil.
func (f Fields) Err() error {
	if len(f) == 0 {
		return nil
	}
	return &ValidationError{Fields: f.List()}
}

// RuleError is a command that breaks a business rule of the aggregate (an
// illegal transition, a change to a final entity). It answers 422; Rule is
// a stable, dotted identifier such as "order.invalid_transition".
type RuleError struct {
	Rule   string
	Detail string
}

func (e *RuleError) Error() string { return e.Rule + ": " + e.Detail }

// ConflictError is a write that lost a race (or clashed with another). It
// answers 409.
type ConflictError struct {
	Detail string
	// With names what the write clashed with, e.g.
	// {"conflicting_schedule_id": "..."}; shown as members of the problem.
	With map[string]string
}

func (e *ConflictError) Error() string { return "conflict: " + e.Detail }

// LimitError is a write refused because what it adds is at a cap of what
// one merchant or resource may hold at once (not a rule of the entity: it
// passes once some of it is done). It answers 429 with Retry-After; Limit
// is a stable name of the cap (the problem's limit member).
type LimitError struct {
	Limit      string
	Detail     string
	RetryAfter time.Duration
}

func (e *LimitError) Error() string { return e.Limit + ": " + e.Detail }

// VersionError is a write that stated the version it read, and the entity
// has moved on since. It answers 409 (412 when the version came from
// If-Match); the client reads the entity again.
type VersionError struct {
	Kind             string // e.g. "order"
	ID               string
	Expected, Actual int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("%s %s is at version %d, not %d; read it again and retry", e.Kind, e.ID, e.Actual, e.Expected)
}

// TransitionError is a status change that an aggregate's life cycle does
// not allow. It answers 422 with the rule "<aggregate>.invalid_transition".
type TransitionError[S ~string] struct {
	Aggregate string // e.g. "order", "service_request"
	From, To  S
}

func (e *TransitionError[S]) Error() string {
	return fmt.Sprintf("%s cannot move from %s to %s", strings.ReplaceAll(e.Aggregate, "_", " "), e.From, e.To)
}

// Rule names the broken rule.
func (e *TransitionError[S]) Rule() string { return e.Aggregate + ".invalid_transition" }
