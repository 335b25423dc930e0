package readmodel

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"hearth/app/ops"
	"hearth/app/query"
)

// StaffRows reads what the read models hold about one staff member
// (ops.StaffExportReadModel).
type StaffRows struct {
	db *bun.DB
}

// NewStaffRows returns the reader on the read-model database (the request
// pool).
func NewStaffRows(db *bun.DB) (*StaffRows, error) {
	if db == nil {
		return nil, errors.New("readmodel.NewStaffRows: nil db")
	}
	return &StaffRows{db: db}, nil
}

// StaffSchedules implements ops.StaffExportReadModel: the schedules
// assigned to the staff member, by start then id (the index
// schedules_merchant_staff_start), at most limit+1 rows read to tell a
// list past the cap (ops.StaffTooLarge) without reading it whole.
func (r *StaffRows) StaffSchedules(ctx context.Context, merchantID, staffID string, limit int) ([]query.Schedule, error) {
	var rows []scheduleRow
	if err := r.db.NewSelect().Model(&rows).Where("merchant_id = ? AND staff_id = ?", merchantID, staffID).
		OrderExpr("start_at, id").Limit(int64(limit + 1)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("select the staff member's schedules: %w", err)
	}
	if len(rows) > limit {
		return nil, ops.StaffTooLarge("schedules", limit)
	}
	out := make([]query.Schedule, len(rows))
	for i, s := range rows {
		out[i] = s.view()
	}
	return out, nil
}
