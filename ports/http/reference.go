package httpport

import (
	"net/http"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/reference"
	"hearth/domain/text"
)

// records serves one kind of reference record: POST, GET list (q, page,
// page_size), GET one, PATCH.
type records[T any, P reference.Record[T], In, B any] struct {
	s    *server
	path string
	cmd  command.Records[T, P]
	q    query.Records[T]
	// create turns a decoded body into a new record; patch applies a
	// decoded body to a stored one (nil fields keep their value).
	create func(in In) T
	patch  func(in In, v *T)
	// body is the record as the API shows it.
	body func(T) B
}

func (rs records[T, P, In, B]) routes() []route {
	return []route{
		{pattern: "POST " + rs.path, handle: rs.post},
		{pattern: "GET " + rs.path, handle: rs.list},
		{pattern: "GET " + rs.path + "/{id}", handle: rs.get},
		{pattern: "PATCH " + rs.path + "/{id}", handle: rs.update},
	}
}

func (rs records[T, P, In, B]) post(w http.ResponseWriter, r *http.Request) error {
	var in In
	if err := decode(r, &in); err != nil {
		return err
	}
	how := recordAnswerer(http.StatusCreated, func(v *T) string { return rs.path + "/" + *P(v).Key().ID }, rs.body)
	v, err := rs.cmd.Create(how.seal(r), principal(r).MerchantID, rs.create(in), rs.s.Now())
	if err != nil {
		return err
	}
	return how.reply(w, r, &v)
}

func (rs records[T, P, In, B]) get(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	v, err := rs.q.Get(r.Context(), principal(r).MerchantID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rs.body(v))
	return nil
}

func (rs records[T, P, In, B]) list(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	q := p.one("q")
	if len(q) > 200 {
		p.fail("q", "must be at most 200 bytes")
	} else if problem := text.Problem(q, false); problem != "" {
		p.fail("q", "%s", problem)
	}
	page := p.listPage() // after the filters: a malformed one is told first
	if p.err != nil {
		return p.err
	}
	list, err := rs.q.List(r.Context(), principal(r).MerchantID, q, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBodyOf(nextOf(p, list), rs.body))
	return nil
}

func (rs records[T, P, In, B]) update(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in In
	if err := decode(r, &in); err != nil {
		return err
	}
	how := recordAnswerer(http.StatusOK, nil, rs.body)
	v, err := rs.cmd.Update(how.seal(r), principal(r).MerchantID, principal(r).Subject(), id, func(v *T) { rs.patch(in, v) }, rs.s.Now())
	if err != nil {
		return err
	}
	return how.reply(w, r, &v)
}

func set[V any](dst *V, src *V) {
	if src != nil {
		*dst = *src
	}
}

func deref[V any](p *V) V {
	var zero V
	if p == nil {
		return zero
	}
	return *p
}

type customerInput struct {
	Name    *string `json:"name"`
	Phone   *string `json:"phone"`
	Email   *string `json:"email"`
	Address *string `json:"address" text:"multiline"`
	Notes   *string `json:"notes" text:"multiline"`
}

type staffInput struct {
	Name   *string `json:"name"`
	Phone  *string `json:"phone"`
	Active *bool   `json:"active"`
}

type catalogItemInput struct {
	Name           *string `json:"name"`
	BasePriceCents *int64  `json:"base_price_cents"`
	Active         *bool   `json:"active"`
}

// referenceRoutes are the routes of customers, staff and catalog items.
func (s *server) referenceRoutes() [][]route {
	return [][]route{records[reference.Customer, *reference.Customer, customerInput, customerBody]{
		s: s, path: "/v1/customers", body: customerBodyOf, cmd: s.App.Commands.Customers, q: s.App.Queries.Customers,
		create: func(in customerInput) reference.Customer {
			return reference.Customer{Name: deref(in.Name), Phone: deref(in.Phone), Email: deref(in.Email),
				Address: deref(in.Address), Notes: deref(in.Notes)}
		},
		patch: func(in customerInput, v *reference.Customer) {
			set(&v.Name, in.Name)
			set(&v.Phone, in.Phone)
			set(&v.Email, in.Email)
			set(&v.Address, in.Address)
			set(&v.Notes, in.Notes)
		},
	}.routes(), records[reference.StaffMember, *reference.StaffMember, staffInput, staffBody]{
		s: s, path: "/v1/staff", body: staffBodyOf, cmd: s.App.Commands.Staff, q: s.App.Queries.Staff,
		create: func(in staffInput) reference.StaffMember {
			active := in.Active == nil || *in.Active
			return reference.StaffMember{Name: deref(in.Name), Phone: deref(in.Phone), Active: active}
		},
		patch: func(in staffInput, v *reference.StaffMember) {
			set(&v.Name, in.Name)
			set(&v.Phone, in.Phone)
			set(&v.Active, in.Active)
		},
	}.routes(), records[reference.CatalogItem, *reference.CatalogItem, catalogItemInput, catalogItemBody]{
		s: s, path: "/v1/catalog-items", body: catalogItemBodyOf, cmd: s.App.Commands.CatalogItems, q: s.App.Queries.CatalogItems,
		create: func(in catalogItemInput) reference.CatalogItem {
			active := in.Active == nil || *in.Active
			return reference.CatalogItem{Name: deref(in.Name), BasePriceCents: deref(in.BasePriceCents), Active: active}
		},
		patch: func(in catalogItemInput, v *reference.CatalogItem) {
			set(&v.Name, in.Name)
			set(&v.BasePriceCents, in.BasePriceCents)
			set(&v.Active, in.Active)
		},
	}.routes()}
}
