package schedule_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/schedule"
	"hearth/domain/uuid"
)

var start = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func planned(t *testing.T) *schedule.Schedule {
	t.Helper()
	s, err := schedule.New(uuid.New(), uuid.New(), uuid.New(), schedule.Window{StaffID: uuid.New(), StartAt: start, EndAt: start.Add(time.Hour)}, "")
	require.NoError(t, err)
	s, err = schedule.Rehydrate(s.Changes())
	require.NoError(t, err)
	return s
}

func TestTransitions(t *testing.T) {
	legal := map[schedule.Status][]schedule.Status{
		schedule.StatusPlanned:   {schedule.StatusInService, schedule.StatusCancelled},
		schedule.StatusInService: {schedule.StatusDone, schedule.StatusCancelled},
	}
	reach := map[schedule.Status][]schedule.Status{
		schedule.StatusPlanned:   nil,
		schedule.StatusInService: {schedule.StatusInService},
		schedule.StatusDone:      {schedule.StatusInService, schedule.StatusDone},
		schedule.StatusCancelled: {schedule.StatusCancelled},
	}
	for _, from := range schedule.Statuses {
		for _, to := range schedule.Statuses {
			if from == to {
				continue
			}
			t.Run(string(from)+"->"+string(to), func(t *testing.T) {
				s := planned(t)
				for _, step := range reach[from] {
					require.NoError(t, s.ChangeStatus(step))
				}
				before := len(s.Changes())
				err := s.ChangeStatus(to)
				ok := false
				for _, l := range legal[from] {
					ok = ok || l == to
				}
				if ok {
					require.NoError(t, err)
					require.Equal(t, to, s.Status())
					return
				}
				require.ErrorAs(t, err, new(*schedule.InvalidTransitionError))
				require.Len(t, s.Changes(), before, "a broken rule records nothing")
			})
		}
	}
}

func TestReassignOnlyWhilePlanned(t *testing.T) {
	s := planned(t)
	w := s.Window()
	require.NoError(t, s.Reassign(w), "the same window again changes nothing")
	require.Empty(t, s.Changes())
	w.StartAt = w.StartAt.Add(time.Hour)
	w.EndAt = w.EndAt.Add(time.Hour)
	require.NoError(t, s.Reassign(w))
	require.Len(t, s.Changes(), 1)

	require.NoError(t, s.ChangeStatus(schedule.StatusInService))
	w.EndAt = w.EndAt.Add(time.Hour)
	var rule *apperr.RuleError
	require.ErrorAs(t, s.Reassign(w), &rule)
	require.Equal(t, "schedule.not_planned", rule.Rule)
}

func TestWindowValidation(t *testing.T) {
	_, err := schedule.New(uuid.New(), uuid.New(), uuid.New(), schedule.Window{StaffID: "x", StartAt: start, EndAt: start}, "")
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	fields := map[string]bool{}
	for _, f := range v.Fields {
		fields[f.Field] = true
	}
	require.Equal(t, map[string]bool{"staff_id": true, "end_at": true}, fields)
}
