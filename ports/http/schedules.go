package httpport

import (
	"net/http"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/schedule"
)

func (s *server) changeScheduleStatus(w http.ResponseWriter, r *http.Request) error {
	var in statusInput
	if err := decode(r, &in); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	expected, err := expectedVersion(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	cmd := command.ChangeScheduleStatus{Meta: s.meta(r), ScheduleID: id, ExpectedVersion: expected, Status: in.Status}
	if p := principal(r); p.Role == access.Worker {
		cmd.WorkerStaffID = p.StaffID
	}
	how := s.scheduleAnswer(r)
	out, err := s.App.Commands.Schedules.ChangeStatus(how.seal(r), cmd)
	if err != nil {
		return err
	}
	return how.reply(w, r, out)
}

func (s *server) getSchedule(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	v, err := s.App.Queries.Schedules.Get(r.Context(), scope(r), id)
	if err != nil {
		return err
	}
	if notModified(w, r, v.Version) {
		return nil
	}
	writeJSON(w, http.StatusOK, scheduleBodyOf(v))
	return nil
}

func (s *server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	f := query.ScheduleFilter{
		Statuses: p.oneOf("status", names(schedule.Statuses)),
		StaffID:  p.uuid("staff_id"),
	}
	f.From, f.To = p.timeRange()
	page := p.listPage()
	if p.err != nil {
		return p.err
	}
	list, err := s.App.Queries.Schedules.List(r.Context(), scope(r), f, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBodyOf(nextOf(p, list), scheduleBodyOf))
	return nil
}
