package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
)

// pager links the pages of a list, keeping the list's other parameters.
// A list counts up to query.MaxDepth rows (More: there are more), and
// numbered pages stop there.
type pager struct {
	Page, Pages, Total int
	More               bool
	Prev, Next         string
}

func newPager(r *http.Request, l interface{ total() (int, bool, int, int) }) pager {
	total, exact, page, size := l.total()
	p := pager{Page: page, Total: total, More: !exact, Pages: max(1, (total+size-1)/size)}
	link := func(n int) string {
		q := r.URL.Query()
		q.Del("part")
		q.Set("page", strconv.Itoa(n))
		return r.URL.Path + "?" + q.Encode()
	}
	if page > 1 {
		p.Prev = link(page - 1)
	}
	if page < p.Pages {
		p.Next = link(page + 1)
	}
	return p
}

// listOf adapts a query.List to newPager.
type listOf[T any] query.List[T]

func (l listOf[T]) total() (int, bool, int, int) { return l.Total, l.TotalExact, l.Page, l.PageSize }

// pageParam reads ?page (from 1, at most the last page within the first
// query.MaxDepth rows).
func pageParam(r *http.Request, size int) query.Page {
	n, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || n < 1 {
		n = 1
	}
	return query.Page{Number: min(n, query.MaxDepth/size), Size: size}
}

// dayRange reads ?from and ?to as dates in the session's zone: [from 00:00,
// the day after to 00:00), each midnight by civil.Resolve (where the clocks
// skip midnight, the day starts at the jump, not an hour before it). A date
// whose midnight is no storable instant (0001-01-01 in a zone ahead of UTC
// is in year 0, which Postgres refuses) is left out, as an unreadable one.
func dayRange(r *http.Request, loc *time.Location) (from, to *time.Time) {
	q := r.URL.Query()
	if d, err := civil.ParseDate(q.Get("from")); err == nil {
		if t := civil.Resolve(d, 0, loc); event.InstantProblem(t) == "" {
			from = &t
		}
	}
	if d, err := civil.ParseDate(q.Get("to")); err == nil {
		if t := civil.Resolve(d.AddDays(1), 0, loc); event.InstantProblem(t) == "" {
			to = &t
		}
	}
	return from, to
}

// choice is one checkbox of a filter.
type choice struct {
	Value   string
	Checked bool
}

func choices[S ~string](all []S, checked []string) []choice {
	out := make([]choice, len(all))
	for i, v := range all {
		out[i] = choice{Value: string(v), Checked: slices.Contains(checked, string(v))}
	}
	return out
}

// only keeps the values that are one of all.
func only[S ~string](values []string, all []S) []string {
	var out []string
	for _, v := range values {
		if slices.Contains(all, S(v)) {
			out = append(out, v)
		}
	}
	return out
}

type requestsData struct {
	Items              []query.ServiceRequest
	Pager              pager
	Statuses           []choice
	CustomerID         string
	From, To           string
	CustomerQ          string
	Customers, Catalog []option
	Sources            []option
	// Back is the page the rows' forms come back to: the page's address,
	// never a live part's poll's (?part= answers the bare list), so that
	// the list refreshed is the list the page showed.
	Back                 string
	DefaultStart, DefEnd string
}

// The inbox shows new and confirmed requests unless the filter says
// otherwise.
var inboxStatuses = []string{string(servicerequest.StatusNew), string(servicerequest.StatusConfirmed)}

func (c *Console) requestsPage(r *http.Request, s *session) (*page, error) {
	ctx, q := r.Context(), r.URL.Query()
	statuses := only(q["status"], servicerequest.Statuses)
	if !q.Has("filtered") {
		statuses = inboxStatuses
	}
	f := query.ServiceRequestFilter{Statuses: statuses, CustomerID: q.Get("customer_id")}
	if f.CustomerID != "" && !uuid.Valid(f.CustomerID) {
		// Left out, as on the orders page: the read model's column is a
		// uuid, and Postgres would refuse the whole query.
		f.CustomerID = ""
	}
	f.From, f.To = dayRange(r, s.loc)
	list, err := c.cfg.App.Queries.ServiceRequests.List(ctx, scope(s), f, pageParam(r, 25))
	if err != nil {
		return nil, err
	}
	d := &requestsData{Items: list.Items, Pager: newPager(r, listOf[query.ServiceRequest](list)),
		Statuses: choices(servicerequest.Statuses, statuses), CustomerID: f.CustomerID, From: q.Get("from"), To: q.Get("to"),
		CustomerQ: searchOf(q.Get("cq")), Back: pageAddress(r)}
	if d.Customers, err = c.customerOptions(r, s, d.CustomerQ); err != nil {
		return nil, err
	}
	if d.Catalog, err = c.catalogOptions(r, s); err != nil {
		return nil, err
	}
	for _, src := range []string{"phone", "web", "walk_in", "manual"} {
		d.Sources = append(d.Sources, option{Value: src, Label: label(src)})
	}
	return &page{Title: "Service requests", Nav: "requests", Data: d, name: "requests"}, nil
}

// customerOptions are the newest 200 customers, or those whose name
// matches search, and the customer a refused form had chosen (found by an
// earlier search, perhaps), so that the form shown again keeps it.
func (c *Console) customerOptions(r *http.Request, s *session, search string) ([]option, error) {
	l, err := c.cfg.App.Queries.Customers.List(r.Context(), s.principal.MerchantID, search, query.Page{Number: 1, Size: 200})
	if err != nil {
		return nil, err
	}
	out := make([]option, len(l.Items))
	for i, v := range l.Items {
		out[i] = option{Value: v.ID, Label: v.Name}
	}
	chosen := r.PostFormValue("customer_id")
	if id, ok := uuid.Parse(chosen); ok && !slices.ContainsFunc(out, func(o option) bool { return o.Value == id }) {
		switch v, err := c.cfg.App.Queries.Customers.Get(r.Context(), s.principal.MerchantID, id); {
		case err == nil:
			out = append([]option{{Value: chosen, Label: v.Name}}, out...)
		case !errors.Is(err, apperr.ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

// catalogOptions are the active catalog items, and "none".
func (c *Console) catalogOptions(r *http.Request, s *session) ([]option, error) {
	l, err := c.cfg.App.Queries.CatalogItems.List(r.Context(), s.principal.MerchantID, "", query.Page{Number: 1, Size: 200})
	if err != nil {
		return nil, err
	}
	out := []option{{Value: "", Label: "(none)"}}
	for _, v := range l.Items {
		if v.Active {
			out = append(out, option{Value: v.ID, Label: v.Name + " · " + money(v.BasePriceCents)})
		}
	}
	return out, nil
}

// createRequest records a service request (POST /v1/service-requests).
func (c *Console) createRequest(w http.ResponseWriter, r *http.Request, s *session) error {
	f := newFormReader(r, s)
	cmd := command.CreateServiceRequest{Meta: c.meta(w, s), CustomerID: f.text("customer_id"), Source: f.text("source"),
		Details: servicerequest.Details{CatalogItemID: f.text("catalog_item_id"), Content: f.text("content"),
			AppointmentStartAt: f.when("appointment_start_at"), AppointmentEndAt: f.when("appointment_end_at"), Notes: f.text("notes")}}
	err := f.Err()
	var written command.Written
	if err == nil {
		written, err = c.cfg.App.Commands.ServiceRequests.Create(r.Context(), cmd)
	}
	if err != nil {
		return c.refuse(w, r, s, err, "new-request", c.requestsPage,
			"customer_id", "catalog_item_id", "content", "appointment_start_at", "appointment_end_at", "source", "notes")
	}
	return c.done(w, r, s, written.Position, "/console/requests", "Request recorded.")
}

// refuse shows the page again with the refused form (an error the API
// expects), or fails.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, s *session, err error, formID string,
	build func(r *http.Request, s *session) (*page, error), fields ...string) error {
	if !known(err) {
		return err
	}
	p, perr := build(r, s)
	if perr != nil {
		return perr
	}
	p.Form = newForm(formID, r.PostForm, err, fields...)
	c.render(w, r, s, refusal(p.Form), p.template(), p)
	return nil
}

// requestStatus confirms or cancels a request (POST
// /v1/service-requests/{id}/status).
func (c *Console) requestStatus(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	f := newFormReader(r, s)
	status := f.text("status")
	cmd := command.ChangeServiceRequestStatus{RequestTarget: command.RequestTarget{Meta: c.meta(w, s), RequestID: id,
		ExpectedVersion: f.version()}, Status: status}
	var written command.Written
	if err = f.Err(); err == nil {
		written, err = c.cfg.App.Commands.ServiceRequests.ChangeStatus(r.Context(), cmd)
	}
	back := cmp.Or(safeNext(f.text("back")), "/console/requests")
	if err != nil {
		return c.refuse(w, r, s, err, "request-"+id, c.backPage(back), "status")
	}
	return c.done(w, r, s, written.Position, back, fmt.Sprintf("Request %s.", label(status)))
}

// convertRequest turns a confirmed request into an order (POST
// /v1/service-requests/{id}/convert) and opens the order.
func (c *Console) convertRequest(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	f := newFormReader(r, s)
	t := command.RequestTarget{Meta: c.meta(w, s), RequestID: id, ExpectedVersion: f.version()}
	var written command.Written
	if err = f.Err(); err == nil {
		written, err = c.cfg.App.Commands.ServiceRequests.Convert(r.Context(), t)
	}
	if err != nil {
		back := cmp.Or(safeNext(f.text("back")), "/console/requests")
		return c.refuse(w, r, s, err, "request-"+id, c.backPage(back))
	}
	orderID := ""
	if len(written.Stream) > 0 {
		orderID = written.Stream[0].StreamID
	}
	return c.done(w, r, s, written.Position, "/console/orders/"+url.PathEscape(orderID), "Request converted into this order.")
}

// backPage builds the list page a row's action came from, to show a
// refused action on it.
func (c *Console) backPage(back string) func(r *http.Request, s *session) (*page, error) {
	return func(r *http.Request, s *session) (*page, error) {
		u, err := url.Parse(back)
		if err != nil {
			return nil, err
		}
		g := r.Clone(r.Context())
		g.Method, g.URL = http.MethodGet, u
		if u.Path == "/console/orders" {
			return c.ordersPage(g, s)
		}
		return c.requestsPage(g, s)
	}
}

// customerName is the name of the merchant's customer, or its id.
func (c *Console) customerName(r *http.Request, s *session, id string) string {
	v, err := c.cfg.App.Queries.Customers.Get(r.Context(), s.principal.MerchantID, id)
	if err != nil {
		return id
	}
	return v.Name
}
