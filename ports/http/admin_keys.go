package httpport

import (
	"context"
	"net/http"
	"time"

	"hearth/app/access"
	"hearth/app/ops"
	"hearth/app/query"
)

// KeyAdmin is the admin's use cases of API keys (access.Keys). Each change
// is recorded in the audit log, in its transaction, as done by actor.
type KeyAdmin interface {
	ListKeys(ctx context.Context, merchantID string, p query.Page) ([]access.Key, int, error)
	IssueKey(ctx context.Context, spec access.KeySpec, actor string) (access.NewKey, error)
	RevokeKey(ctx context.Context, id, actor string) (access.Key, error)
	RotateKey(ctx context.Context, id string, grace time.Duration, actor string) (access.Rotation, error)
}

// AuditLog reads the log of admin actions (ops.AuditTrail).
type AuditLog interface {
	ListAuditOf(ctx context.Context, f ops.AuditFilter, p query.Page) ([]ops.AuditEntry, int, error)
}

func (s *server) listKeys(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	merchantID := p.uuid("merchant_id")
	page := p.page()
	if p.err != nil {
		return p.err
	}
	keys, total, err := s.Keys.ListKeys(r.Context(), merchantID, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBody[KeyBody]{Items: mapAll(keys, KeyBodyOf), Total: total, TotalExact: true, Page: page.Number, PageSize: page.Size})
	return nil
}

// keyInput is the body of POST /admin/keys: an operator or worker key
// names its merchant by merchant_id or by merchant (a name, created when
// missing); an admin key names none.
type keyInput struct {
	Role       string  `json:"role"`
	MerchantID string  `json:"merchant_id"`
	Merchant   string  `json:"merchant"`
	StaffID    string  `json:"staff_id"`
	Name       string  `json:"name"`
	ExpiresAt  *string `json:"expires_at"`
}

func (s *server) createKey(w http.ResponseWriter, r *http.Request) error {
	var in keyInput
	if err := decode(r, &in); err != nil {
		return err
	}
	expires, err := parseTime("expires_at", in.ExpiresAt)
	if err != nil {
		return err
	}
	k, err := s.Keys.IssueKey(r.Context(), access.KeySpec{MerchantID: in.MerchantID, MerchantName: in.Merchant,
		Role: access.Role(in.Role), StaffID: in.StaffID, Name: in.Name, ExpiresAt: expires}, principal(r).Subject())
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store") // the secret, once
	writeJSON(w, http.StatusCreated, newKeyBodyOf(k))
	return nil
}

func (s *server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := noBody(r); err != nil {
		return err
	}
	k, err := s.Keys.RevokeKey(r.Context(), id, principal(r).Subject())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, KeyBodyOf(k))
	return nil
}

// rotateInput is the optional body of POST /admin/keys/{id}/rotate.
type rotateInput struct {
	// Grace is how long the old key keeps working, a Go duration ("24h");
	// empty or "0s" revokes it at once.
	Grace string `json:"grace"`
}

func (s *server) rotateKey(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in rotateInput
	if err := decodeOptional(r, &in); err != nil {
		return err
	}
	var grace time.Duration
	if in.Grace != "" {
		if grace, err = time.ParseDuration(in.Grace); err != nil {
			return malformed("grace", "must be a duration such as 24h or 90m, got %q", in.Grace)
		}
	}
	rot, err := s.Keys.RotateKey(r.Context(), id, grace, principal(r).Subject())
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store") // the new secret, once
	writeJSON(w, http.StatusCreated, rotationBodyOf(rot))
	return nil
}

func (s *server) listAudit(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	f := ops.AuditFilter{Target: p.one("target"), Action: p.one("action")}
	if field, problem := f.Problem(); problem != "" {
		p.fail(field, "%s", problem)
	}
	page := p.page()
	if p.err != nil {
		return p.err
	}
	items, total, err := s.Audit.ListAuditOf(r.Context(), f, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBody[AuditEntryBody]{Items: mapAll(items, AuditEntryBodyOf), Total: total, TotalExact: true, Page: page.Number, PageSize: page.Size})
	return nil
}
