package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// ErasedSubject is one erasure on record (erased_subjects): ids and a
// time, never personal data, so a list of them can be kept beside the
// backups, where the erasure cannot reach.
type ErasedSubject struct {
	SubjectType string // event.SubjectCustomer or event.SubjectStaffMember
	SubjectID   string
	MerchantID  string
	ErasedAt    time.Time
}

// SubjectOnRecord is what a database holds of a data subject's id: its
// merchant and type, and whether it is recorded erased.
type SubjectOnRecord struct {
	SubjectType string
	MerchantID  string
	Erased      bool
}

// ErasureRecordStore reads the erasures on record and the subjects a
// database holds (pubsub.Store).
type ErasureRecordStore interface {
	// ErasedSubjects lists every subject recorded erased, the earliest
	// erased first.
	ErasedSubjects(ctx context.Context) ([]ErasedSubject, error)
	// Subjects finds the customers and staff members of ids, whatever
	// their merchant; an id it holds neither of is left out.
	Subjects(ctx context.Context, ids []string) (map[string]SubjectOnRecord, error)
}

// ErasureRecords is the use case of keeping erasures across a restore: a
// restored database holds the erased_subjects of its backup's day, and a
// person erased after the backup comes back with it. Export lists the
// erasures on record (the operator keeps the list beside the backups);
// Reapply erases again, in a restored database, every subject of such a
// list that it holds and has not recorded erased.
type ErasureRecords struct {
	store    ErasureRecordStore
	erasures *Erasures
}

// NewErasureRecords returns the use case; erasures erases (its store and
// settle time).
func NewErasureRecords(store ErasureRecordStore, erasures *Erasures) (*ErasureRecords, error) {
	if store == nil || erasures == nil {
		return nil, errors.New("ops.NewErasureRecords: nil store or erasures")
	}
	return &ErasureRecords{store: store, erasures: erasures}, nil
}

// Export lists every erasure on record.
func (r *ErasureRecords) Export(ctx context.Context) ([]ErasedSubject, error) {
	out, err := r.store.ErasedSubjects(ctx)
	if err != nil {
		return nil, fmt.Errorf("export erasures: %w", err)
	}
	return out, nil
}

// The rules an erasure list breaks when it is not this database's.
const (
	// RuleErasuresOtherMerchant is a subject the database holds under
	// another merchant than the list says.
	RuleErasuresOtherMerchant = "erasures.other_merchant"
	// RuleErasuresOtherType is an id the database holds as another type of
	// subject than the list says.
	RuleErasuresOtherType = "erasures.other_type"
)

// Reapplied is what Reapply did.
type Reapplied struct {
	// Erased are the subjects erased by this run; AlreadyErased counts
	// those the database had recorded erased (nothing to do); Absent are
	// those it does not hold (created after the backup: nothing to erase).
	Erased        []ErasedSubject
	AlreadyErased int
	Absent        []ErasedSubject
	// SecondPassesPending counts the erasures of this run whose second
	// pass failed: their records stay, and the erasure worker (or `app
	// erasures run`) completes them.
	SecondPassesPending int
}

// Reapply erases again the subjects of list that the database holds and
// has not recorded erased, by the ordinary erasure (both passes, audited
// as done by by). It checks the whole list first and erases nothing when
// an entry is malformed (apperr.Invalid naming erasures[i] and the field)
// or names a subject the database holds under another merchant or type (a
// list of another deployment: apperr.RuleBroken): a list it cannot trust
// must not erase anybody. Running it again finds them erased and does
// nothing. The first passes run one after another, then one wait lets
// every instance's cached keys expire, then the second passes: one wait
// for the whole list, not one per subject.
func (r *ErasureRecords) Reapply(ctx context.Context, by string, list []ErasedSubject) (Reapplied, error) {
	by = strings.TrimSpace(by)
	if err := CheckActor(by); err != nil {
		return Reapplied{}, err
	}
	ids := make([]string, 0, len(list))
	for i, s := range list {
		field := fmt.Sprintf("erasures[%d]", i)
		if s.SubjectType != event.SubjectCustomer && s.SubjectType != event.SubjectStaffMember {
			return Reapplied{}, apperr.Invalid(field+".subject_type", "must be %s or %s, got %q", event.SubjectCustomer, event.SubjectStaffMember, s.SubjectType)
		}
		id, ok := uuid.Parse(s.SubjectID)
		if !ok {
			return Reapplied{}, apperr.Invalid(field+".subject_id", "must be a UUID, got %q", s.SubjectID)
		}
		merchant, ok := uuid.Parse(s.MerchantID)
		if !ok {
			return Reapplied{}, apperr.Invalid(field+".merchant_id", "must be a UUID, got %q", s.MerchantID)
		}
		list[i].SubjectID, list[i].MerchantID = id, merchant
		ids = append(ids, id)
	}
	held, err := r.store.Subjects(ctx, ids)
	if err != nil {
		return Reapplied{}, fmt.Errorf("reapply erasures: %w", err)
	}
	var out Reapplied
	var todo []ErasedSubject
	seen := map[string]bool{}
	for i, s := range list {
		h, ok := held[s.SubjectID]
		switch {
		case !ok:
			out.Absent = append(out.Absent, s)
			continue
		case h.SubjectType != s.SubjectType:
			return Reapplied{}, &apperr.RuleError{Rule: RuleErasuresOtherType, Detail: fmt.Sprintf(
				"erasures[%d]: this database holds %s as a %s, not a %s: is the list this deployment's?", i, s.SubjectID, h.SubjectType, s.SubjectType)}
		case h.MerchantID != s.MerchantID:
			return Reapplied{}, &apperr.RuleError{Rule: RuleErasuresOtherMerchant, Detail: fmt.Sprintf(
				"erasures[%d]: this database holds %s %s under merchant %s, not %s: is the list this deployment's?", i, s.SubjectType, s.SubjectID, h.MerchantID, s.MerchantID)}
		case h.Erased || seen[s.SubjectID]:
			out.AlreadyErased++
			continue
		}
		seen[s.SubjectID] = true
		todo = append(todo, s)
	}
	x := r.erasures
	passes := make([]ErasureRequest, 0, len(todo))
	for _, s := range todo {
		req := ErasureRequest{By: by, MerchantID: s.MerchantID, SubjectType: s.SubjectType, SubjectID: s.SubjectID,
			Confirm: s.SubjectID, Settle: x.settle}
		first, err := x.pass(ctx, req, erasureAudit(req))
		if err != nil {
			return out, fmt.Errorf("erase %s %s again: %w", s.SubjectType, s.SubjectID, err)
		}
		out.Erased = append(out.Erased, s)
		req.SecondPass, req.Due = true, first.SecondPassDue
		passes = append(passes, req)
	}
	if len(passes) == 0 {
		return out, nil
	}
	// The first passes have committed; as in Erase, the wait and the second
	// passes go on when the caller goes away, and the worker runs any left.
	done, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.settle+secondPassTimeout)
	defer cancel()
	if err := x.Wait(done, x.settle); err != nil {
		out.SecondPassesPending = len(passes)
		return out, nil
	}
	for _, req := range passes {
		if _, err := x.pass(done, req, erasureAudit(req)); err != nil {
			out.SecondPassesPending++
		}
	}
	return out, nil
}
