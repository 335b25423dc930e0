package console

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/reference"
)

// formKeyField is the hidden input that carries a form's key: a random
// token drawn for each form a page renders (the "csrf" template), which
// the form's write is recorded under, as an API write under its
// Idempotency-Key. It works without JavaScript: the browser sends it back
// with the form, however often.
const formKeyField = "form_key"

// The messages of a form sent again.
const (
	sentBefore = "This form was already sent, and saved then; sent again, it saved nothing more. This page shows what it saved."
	sentOther  = "This form was already sent and saved, with other values than these; these were not saved. " +
		"Check the page, and send the form again to save them too."
	sentStill = "This form was already sent and is still being saved; reload the page in a moment to see it."
)

// errSentOther refuses a form sent again under its key with other values
// (back, changed, sent again): the write is rolled back and the form comes
// back with what was typed, and a new key, so that sending it again
// writes knowingly.
var errSentOther = &apperr.ConflictError{Detail: sentOther}

// onceRoles are the roles whose forms write once per key: their writes go
// through the use cases that store an idempotent answer in the write's
// transaction (the event store, the reference records, the working
// hours). The on-call actions do not; they are safe to repeat (a replay
// or a skip of what is no longer parked, a rebuild or verification
// already running, each says so).
var onceRoles = []access.Role{access.Operator, access.Worker}

// once runs h, a form's write, at most once per form key: the first
// sending claims the key in the idempotency records (internal/idempotency,
// under a scope of the console's own), the write stores its answer (a
// redirect to the page the form was on) in its own transaction, and a
// sending again of the same form lands on that page, told so, and writes
// nothing. While the first sending runs, the next waits for it
// (IdempotencyWait). A refused or failed write keeps nothing: the key is
// released, and the form (shown again with a key of its own) may be sent
// again. A form without a key (a page rendered by an older release) is
// run as it is.
func (c *Console) once(w http.ResponseWriter, r *http.Request, s *session, h handler) error {
	key := r.PostFormValue(formKeyField)
	if c.cfg.Idempotency == nil || key == "" || len(key) > 255 ||
		strings.ContainsFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		return h(w, r, s)
	}
	merchantID, scope, fp := s.principal.MerchantID, formScope(s.principal), formFingerprint(r)
	for {
		token, rec, err := c.claimForm(r.Context(), merchantID, scope, key, fp)
		switch {
		case err != nil:
			return err
		case rec != nil && (rec.Forgotten || rec.Answer != nil && bytes.Equal(rec.Fingerprint, fp)):
			to := homeOf(s.principal.Role)
			if rec.Answer != nil {
				to = cmp.Or(safeNext(rec.Answer.Header["Location"]), to) // written by landing: a console page
			}
			return seeOther(w, r, s, to, flash{Kind: "ok", Text: sentBefore})
		case rec != nil && !bytes.Equal(rec.Fingerprint, fp):
			// Run, to show the form again through its own refusal; its write
			// fails at its answer, in its transaction, and nothing commits.
			i := &command.Idempotent{MerchantID: merchantID, Key: key,
				Render: func(context.Context, any) (command.Answer, error) { return command.Answer{}, errSentOther }}
			return h(w, r.WithContext(command.WithIdempotent(r.Context(), i)), s)
		case rec != nil:
			return &apperr.ConflictError{Detail: sentStill}
		}
		i := &command.Idempotent{MerchantID: merchantID, Key: key, Token: token}
		to := landing(r, s)
		i.Render = func(_ context.Context, result any) (command.Answer, error) {
			body, err := json.Marshal(formAnswer{Location: to, Written: writtenIDs(result)})
			if err != nil {
				return command.Answer{}, fmt.Errorf("encode a form's answer: %w", err)
			}
			return command.Answer{Status: http.StatusSeeOther, Header: map[string]string{"Location": to}, Body: body}, nil
		}
		err = c.runClaimed(w, r, s, h, i)
		if errors.Is(err, command.ErrKeyTakenOver) {
			continue // a sending again took the key over after this one's lease ran out: its answer counts
		}
		return err
	}
}

// runClaimed runs h as the sending i that holds its form's key, and
// releases the key unless the write stored its answer: refused, failed,
// panicked or writing nothing, the form may be sent again with its key
// at once, not after the lease.
func (c *Console) runClaimed(w http.ResponseWriter, r *http.Request, s *session, h handler, i *command.Idempotent) (err error) {
	defer func() {
		v := recover()
		if i.Answered() == nil && !errors.Is(err, command.ErrKeyTakenOver) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
			if rerr := c.cfg.Idempotency.Release(ctx, i); rerr != nil {
				c.log.WarnContext(r.Context(), "release a form's key", "error", rerr)
			}
			cancel()
		}
		if v != nil {
			panic(v)
		}
	}()
	return h(w, r.WithContext(command.WithIdempotent(r.Context(), i)), s)
}

// claimForm claims the form's key for this sending (token), or returns
// the record of an earlier sending: answered, forgotten by an erasure,
// or of other values; or, still running after IdempotencyWait, with
// neither answer nor another fingerprint.
func (c *Console) claimForm(ctx context.Context, merchantID, scope, key string, fp []byte) (string, *command.IdempotencyRecord, error) {
	deadline := time.Now().Add(c.cfg.IdempotencyWait)
	pause := 5 * time.Millisecond
	for {
		token, err := c.cfg.Idempotency.Claim(ctx, merchantID, scope, key, fp, c.cfg.IdempotencyLease)
		if err != nil || token != "" {
			return token, nil, err
		}
		rec, err := c.cfg.Idempotency.Get(ctx, merchantID, scope, key)
		switch {
		case errors.Is(err, apperr.ErrNotFound) && time.Now().Before(deadline):
			continue // released between the two: claim it
		case errors.Is(err, apperr.ErrNotFound):
			return "", &command.IdempotencyRecord{Fingerprint: fp}, nil // as a sending still running
		case err != nil:
			return "", nil, err
		case rec.Forgotten || rec.Answer != nil || !bytes.Equal(rec.Fingerprint, fp) || !time.Now().Before(deadline):
			return "", &rec, nil
		}
		// The first sending is running: its answer, or its lease's end, is
		// what the next claim or read sees.
		t := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// formAnswer is what is stored of a form's write. Its ids are those of
// what it wrote, as the API's answers name them, so that an erasure finds
// the record of a form that wrote about its subject, as it finds the API's,
// and deletes it with its fingerprint (a hash of what the form sent).
type formAnswer struct {
	Location string   `json:"location"`
	Written  []string `json:"written,omitempty"`
}

// writtenIDs are the ids of what a write wrote: the streams of an
// event-sourced write, a reference record, a staff member's hours.
func writtenIDs(result any) []string {
	switch v := result.(type) {
	case command.Outcome:
		return slices.Sorted(maps.Keys(v.Streams))
	case interface{ Key() *reference.Key }:
		if k := v.Key(); k != nil && k.ID != nil {
			return []string{*k.ID}
		}
	case *availability.StaffHours:
		return []string{v.StaffID}
	}
	return nil
}

// formScope keeps the console's form keys apart from the API's
// Idempotency-Keys, and a worker's from another's, as the API's scopes do.
func formScope(p access.Principal) string {
	if p.Role == access.Worker {
		return "console:" + string(p.Role) + ":" + p.StaffID
	}
	return "console:" + string(p.Role)
}

// formFingerprint identifies what a form sent: its address and its
// fields, but for the session's CSRF token (the same form, sent after
// signing in again, is the same form) and its key.
func formFingerprint(r *http.Request) []byte {
	v := url.Values{}
	for name, values := range r.PostForm {
		if name != "csrf" && name != formKeyField {
			v[name] = slices.Clone(values)
		}
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %s\n%s", r.Method, strings.ToLower(r.URL.Path), v.Encode()))
	return sum[:]
}

// landing is where a form sent again lands: the page the form was on, or
// the key's home page.
func landing(r *http.Request, s *session) string {
	return cmp.Or(formPage(r), homeOf(s.principal.Role))
}

// formPage is the page a form was sent from (as the live parts of its
// refusal poll it: pageAddress), or "" when the browser did not say (no
// Referer, or not a console page of this host).
func formPage(r *http.Request) string {
	if ref, err := url.Parse(r.Referer()); err == nil && ref.Host == r.Host && safeNext(ref.Path) != "" {
		return safeNext(pageAddress(r))
	}
	return ""
}
