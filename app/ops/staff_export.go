package ops

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/reference"
	"hearth/domain/uuid"
)

// ActionStaffExport is an export of everything held about one staff member
// (their access request: GDPR articles 15 and 20).
const ActionStaffExport = "staff_member.export"

// StaffExportSchema names the staff export document's format, as
// ExportSchema does the customer's.
const StaffExportSchema = "hearth.staff-export/1"

// StaffExportRequest is one staff member's export: who asks, and which
// staff member of which merchant.
type StaffExportRequest struct {
	// By is who exports, as ExportRequest.By.
	By         string
	MerchantID string
	StaffID    string
}

// StaffExport is everything Hearth holds about one staff member: their
// record, their working hours with the days they were off, their worker
// keys, and the schedules assigned to them.
type StaffExport struct {
	Schema       string
	ExportedAt   time.Time
	MerchantID   string
	StaffMember  reference.StaffMember
	WorkingHours availability.StaffHours
	// Keys are their worker keys, oldest first: never a secret or a hash.
	Keys []ExportedKey
	// Schedules are the schedules assigned to them now, by start then id.
	// A schedule's notes are the customer's data (sealed under the
	// customer's key, erased with the customer), so each withholds them.
	Schedules []ExportedSchedule
}

// ExportedKey is a worker key of the staff member: what it is called and
// when it was made, used, ends or ended.
type ExportedKey struct {
	ID         string
	Role       string
	Name       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	ExpiresAt  *time.Time
	RevokedAt  *time.Time
}

// StaffHistory is what the event store holds about a staff member
// (refdata.Store).
type StaffHistory struct {
	StaffMember  reference.StaffMember
	WorkingHours availability.StaffHours
	Keys         []ExportedKey
	// At is the transaction's time: when the export was taken.
	At time.Time
}

// StaffExportReadModel reads the schedules assigned to one staff member of
// a merchant. More rows than limit is an *apperr.RuleError
// RuleExportTooLarge (StaffTooLarge).
type StaffExportReadModel interface {
	StaffSchedules(ctx context.Context, merchantID, staffID string, limit int) ([]query.Schedule, error)
}

// StaffExportStore reads the staff member's record, working hours and
// worker keys in one snapshot of the event store, and records the entry
// audit returns in the same transaction. An unknown staff member (or
// another merchant's) is apperr.ErrNotFound, and nothing is recorded.
// limit caps the keys as for StaffExportReadModel.
type StaffExportStore interface {
	StaffHistory(ctx context.Context, merchantID, staffID string, limit int, audit func(StaffHistory) AuditEntry) (StaffHistory, error)
}

// StaffExports is the use case of exporting a staff member's data.
type StaffExports struct {
	rows  StaffExportReadModel
	store StaffExportStore
	limit int
}

// NewStaffExports returns the use case on its adapters; limit caps each
// list (0: MaxExportItems).
func NewStaffExports(rows StaffExportReadModel, store StaffExportStore, limit int) (*StaffExports, error) {
	if rows == nil || store == nil {
		return nil, errors.New("ops.NewStaffExports: nil dependency")
	}
	return &StaffExports{rows: rows, store: store, limit: cmp.Or(limit, MaxExportItems)}, nil
}

// ExportStaffMember returns everything Hearth holds about one staff member
// and records the export in the audit log (who, which staff member, how
// many of each; never a value), in the event store's transaction that read
// it. The read model is read first: an unknown id reads no schedule, and
// the event store then answers not found before anything is recorded.
func (x *StaffExports) ExportStaffMember(ctx context.Context, req StaffExportRequest) (StaffExport, error) {
	by := strings.TrimSpace(req.By)
	if err := CheckActor(by); err != nil {
		return StaffExport{}, err
	}
	id, ok := uuid.Parse(req.StaffID)
	if !ok {
		return StaffExport{}, apperr.Invalid("id", "must be a UUID, got %q", req.StaffID)
	}
	if req.MerchantID == "" {
		return StaffExport{}, errors.New("export staff member: no merchant")
	}
	schedules, err := x.rows.StaffSchedules(ctx, req.MerchantID, id, x.limit)
	if err != nil {
		return StaffExport{}, err
	}
	h, err := x.store.StaffHistory(ctx, req.MerchantID, id, x.limit, func(h StaffHistory) AuditEntry {
		return AuditEntry{Actor: by, Action: ActionStaffExport, Target: "staff_member/" + id,
			Details: map[string]any{"merchant_id": req.MerchantID, "keys": len(h.Keys), "schedules": len(schedules),
				"exceptions": len(h.WorkingHours.Exceptions)}}
	})
	if err != nil {
		return StaffExport{}, err
	}
	out := StaffExport{Schema: StaffExportSchema, ExportedAt: h.At, MerchantID: req.MerchantID, StaffMember: h.StaffMember,
		WorkingHours: h.WorkingHours, Keys: h.Keys, Schedules: make([]ExportedSchedule, len(schedules))}
	for i, s := range schedules {
		s.Notes = ""
		out.Schedules[i] = ExportedSchedule{Schedule: s, Withheld: []string{"notes"}}
	}
	return out, nil
}
