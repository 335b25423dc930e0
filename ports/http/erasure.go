package httpport

import (
	"context"
	"net/http"
	"time"

	"hearth/app/ops"
)

// SubjectErasures erases customers and staff members (ops.Erasures).
type SubjectErasures interface {
	Erase(ctx context.Context, req ops.ErasureRequest) (ops.Erasure, error)
}

// eraseRequest is the body of POST /v1/customers/{id}/erase and POST
// /v1/staff/{id}/erase: confirm repeats the id, because an erasure cannot
// be undone.
type eraseRequest struct {
	Confirm string `json:"confirm"`
}

// erasureBody is an erasure as the API answers it.
type erasureBody struct {
	SubjectType string    `json:"subject_type"`
	ID          string    `json:"id"`
	ErasedAt    time.Time `json:"erased_at"`
	// Aggregates counts the orders, service requests and schedules this
	// request marked; Position, when not 0, is what a GET's min_position
	// takes to read them as erased.
	Aggregates int   `json:"aggregates"`
	Position   int64 `json:"position"`
	// SecondPass is "done", or "pending" when the pass for writes sealed
	// with a key still cached elsewhere has not run yet (the erasure
	// worker runs it from SecondPassDue on): the client learns whether the
	// erasure is complete.
	SecondPass    string    `json:"second_pass"`
	SecondPassDue time.Time `json:"second_pass_due"`
}

// secondPassState is the erasure's second pass as the API and the CLI
// name it.
func secondPassState(e ops.Erasure) string {
	if e.SecondPassPending {
		return "pending"
	}
	return "done"
}

// eraseSubject answers the erasure of one subject type for an operator key
// of the subject's merchant, recorded in the audit log as done by the key.
func (s *server) eraseSubject(subjectType string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := pathID(r)
		if err != nil {
			return err
		}
		var req eraseRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		p := principal(r)
		e, err := s.Erasures.Erase(r.Context(), ops.ErasureRequest{By: p.Subject(), MerchantID: p.MerchantID,
			SubjectType: subjectType, SubjectID: id, Confirm: req.Confirm, CorrelationID: correlationID(r)})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, erasureBody{SubjectType: e.SubjectType, ID: e.SubjectID, ErasedAt: e.ErasedAt,
			Aggregates: e.Streams, Position: e.Position, SecondPass: secondPassState(e), SecondPassDue: e.SecondPassDue})
		return nil
	}
}
