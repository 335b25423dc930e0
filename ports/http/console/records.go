package console

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/reference"
	"hearth/domain/text"
)

// recordKind is the pages of one kind of reference record: a list with a
// create form, and an edit page.
type recordKind struct {
	path                       string
	list, create, edit, update handler
	// page builds the edit page (shown again with a refused form).
	page func(r *http.Request, s *session) (*page, error)
}

// recordField is one field of a kind of record, as its forms and list
// show it (the API's field name).
type recordField struct {
	Name, Label, Type string
	Required, Listed  bool
}

// recordMeta is what the templates know of a kind.
type recordMeta struct {
	Path, Title, Singular string
	Fields                []recordField
}

// recordRow is one record's values, by field name, as the forms show them.
type recordRow struct {
	ID     string
	Values map[string]string
	// Seen is the record's updated_at as the edit page shows it: its form
	// sends it back, and a record changed since is not overwritten.
	Seen string
}

type recordsData struct {
	Kind  recordMeta
	Rows  []recordRow
	Pager pager
	Q     string
}

type recordData struct {
	Kind recordMeta
	Row  recordRow
	// More is what the kind's page shows beside the record (a staff
	// member's working hours), nil for none.
	More any
}

// records serves one kind through the same use cases as the API's
// /v1/customers, /v1/staff and /v1/catalog-items.
type records[T any, P reference.Record[T]] struct {
	c    *Console
	meta recordMeta
	cmd  command.Records[T, P]
	q    query.Records[T]
	row  func(v T) recordRow
	// read reads a submitted form into the change it makes to a record
	// (every field of the form: the forms show them all).
	read func(f *formReader) func(v *T)
	// more reads what the edit page shows beside the record; optional.
	more func(r *http.Request, s *session, id string) (any, error)
}

func (c *Console) recordKinds() []recordKind {
	a := c.cfg.App
	return []recordKind{
		records[reference.Customer, *reference.Customer]{c: c, cmd: a.Commands.Customers, q: a.Queries.Customers,
			meta: recordMeta{Path: "customers", Title: "Customers", Singular: "customer", Fields: []recordField{
				{Name: "name", Label: "Name", Type: "text", Required: true, Listed: true},
				{Name: "phone", Label: "Phone", Type: "tel", Listed: true},
				{Name: "email", Label: "Email", Type: "email", Listed: true},
				{Name: "address", Label: "Address", Type: "textarea", Listed: true},
				{Name: "notes", Label: "Notes", Type: "textarea"},
			}},
			row: func(v reference.Customer) recordRow {
				return recordRow{ID: v.ID, Values: map[string]string{"name": v.Name, "phone": v.Phone, "email": v.Email, "address": v.Address, "notes": v.Notes}}
			},
			read: func(f *formReader) func(v *reference.Customer) {
				in := reference.Customer{Name: f.text("name"), Phone: f.text("phone"), Email: f.text("email"), Address: f.text("address"), Notes: f.text("notes")}
				return func(v *reference.Customer) {
					v.Name, v.Phone, v.Email, v.Address, v.Notes = in.Name, in.Phone, in.Email, in.Address, in.Notes
				}
			},
		}.kind(),
		records[reference.StaffMember, *reference.StaffMember]{c: c, cmd: a.Commands.Staff, q: a.Queries.Staff,
			meta: recordMeta{Path: "staff", Title: "Staff", Singular: "staff member", Fields: []recordField{
				{Name: "name", Label: "Name", Type: "text", Required: true, Listed: true},
				{Name: "phone", Label: "Phone", Type: "tel", Listed: true},
				{Name: "active", Label: "Active (can be assigned)", Type: "checkbox", Listed: true},
			}},
			row: func(v reference.StaffMember) recordRow {
				return recordRow{ID: v.ID, Values: map[string]string{"name": v.Name, "phone": v.Phone, "active": strconv.FormatBool(v.Active)}}
			},
			read: func(f *formReader) func(v *reference.StaffMember) {
				name, phone, active := f.text("name"), f.text("phone"), f.checkbox("active")
				return func(v *reference.StaffMember) { v.Name, v.Phone, v.Active = name, phone, active }
			},
			more: c.staffHours,
		}.kind(),
		records[reference.CatalogItem, *reference.CatalogItem]{c: c, cmd: a.Commands.CatalogItems, q: a.Queries.CatalogItems,
			meta: recordMeta{Path: "catalog", Title: "Catalog", Singular: "catalog item", Fields: []recordField{
				{Name: "name", Label: "Name", Type: "text", Required: true, Listed: true},
				{Name: "base_price_cents", Label: "Base price", Type: "money", Listed: true},
				{Name: "active", Label: "Active (on sale)", Type: "checkbox", Listed: true},
			}},
			row: func(v reference.CatalogItem) recordRow {
				return recordRow{ID: v.ID, Values: map[string]string{"name": v.Name, "base_price_cents": money(v.BasePriceCents), "active": strconv.FormatBool(v.Active)}}
			},
			read: func(f *formReader) func(v *reference.CatalogItem) {
				name, price, active := f.text("name"), f.cents("base_price_cents"), f.checkbox("active")
				return func(v *reference.CatalogItem) { v.Name, v.BasePriceCents, v.Active = name, price, active }
			},
		}.kind(),
	}
}

func (rs records[T, P]) kind() recordKind {
	return recordKind{path: rs.meta.Path, list: rs.c.show(rs.listPage, "records-list"), create: rs.create, edit: rs.c.show(rs.editPage), update: rs.update, page: rs.editPage}
}

func (rs records[T, P]) fieldNames() []string {
	names := make([]string, len(rs.meta.Fields))
	for i, f := range rs.meta.Fields {
		names[i] = f.Name
	}
	return names
}

func (rs records[T, P]) listPage(r *http.Request, s *session) (*page, error) {
	q := searchOf(r.URL.Query().Get("q"))
	l, err := rs.q.List(r.Context(), s.principal.MerchantID, q, pageParam(r, 25))
	if err != nil {
		return nil, err
	}
	d := &recordsData{Kind: rs.meta, Pager: newPager(r, listOf[T](l)), Q: q}
	for _, v := range l.Items {
		d.Rows = append(d.Rows, rs.row(v))
	}
	return &page{Title: rs.meta.Title, Nav: rs.meta.Path, Data: d, name: "records"}, nil
}

// searchOf is a name search from a page's address, which anyone can edit:
// empty when the API would refuse it (GET /v1/customers?q=: more than 200
// bytes, or a control character, which Postgres cannot take), so that the
// page lists without it rather than fail.
func searchOf(q string) string {
	q = strings.TrimSpace(q)
	if len(q) > 200 || text.Problem(q, false) != "" {
		return ""
	}
	return q
}

func (rs records[T, P]) create(w http.ResponseWriter, r *http.Request, s *session) error {
	f := newFormReader(r, s)
	var v T
	rs.read(f)(&v)
	err := f.Err()
	if err == nil {
		v, err = rs.cmd.Create(r.Context(), s.principal.MerchantID, v, rs.c.cfg.Now())
	}
	if err != nil {
		return rs.c.refuse(w, r, s, err, "new", rs.listPage, rs.fieldNames()...)
	}
	// Reference records are plain tables: the list shows them at once. The
	// flash, kept in the session's row, names nobody (an erasure does not
	// reach the sessions).
	return seeOther(w, r, s, "/console/"+rs.meta.Path, flash{Kind: "ok", Text: "Created the new " + rs.meta.Singular + "."})
}

func (rs records[T, P]) editPage(r *http.Request, s *session) (*page, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	v, err := rs.q.Get(r.Context(), s.principal.MerchantID, id)
	if err != nil {
		return nil, err
	}
	row := rs.row(v)
	row.Seen = P(&v).Key().UpdatedAt.UTC().Format(time.RFC3339Nano)
	d := &recordData{Kind: rs.meta, Row: row}
	if rs.more != nil {
		if d.More, err = rs.more(r, s, id); err != nil {
			return nil, err
		}
	}
	return &page{Title: row.Values["name"], Nav: rs.meta.Path, Data: d, name: "record"}, nil
}

func (rs records[T, P]) update(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	f := newFormReader(r, s)
	seen := f.instant("updated_at")
	patch := rs.read(f)
	err = f.Err()
	if err == nil {
		_, err = rs.cmd.UpdateSeen(r.Context(), s.principal.MerchantID, s.principal.Subject(), id, seen, patch, rs.c.cfg.Now())
	}
	if err != nil {
		return rs.c.refuse(w, r, s, err, "edit", rs.editPage, rs.fieldNames()...)
	}
	return seeOther(w, r, s, "/console/"+rs.meta.Path+"/"+id, flash{Kind: "ok", Text: "Saved."})
}
