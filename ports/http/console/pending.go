package console

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// A form sent after its session ended is not saved, but what was typed is
// not lost: the sign-in page it is answered with carries the form (its
// address and fields, as hidden inputs named carryPrefix+name), and once
// signed in the person is shown it to send again, with a click, under the
// session's new CSRF token and the form's own key (once.go), so that
// sending it twice still writes once. Nothing is kept on the server: the
// fields go back and forth in the person's own browser, like the form.

const (
	carryAction = "carry_action"
	carryPrefix = "carry."
)

// pendingForm is a form that was not saved, to send again.
type pendingForm struct {
	Action string
	Fields []pendingField
}

type pendingField struct{ Name, Value string }

// Shown are the fields the page lists for the person to check: not the
// form's key.
func (p *pendingForm) Shown() []pendingField {
	return slices.DeleteFunc(slices.Clone(p.Fields), func(f pendingField) bool { return f.Name == formKeyField })
}

// pendingOf is the form r sent, to carry through a sign-in, or nil when
// there is none to carry: a form of this release (with its key; a form
// without one would not write once if sent again) from this console
// (sameOrigin; a form without its session's CSRF token is no form of the
// person's to carry).
func pendingOf(r *http.Request) *pendingForm {
	if safe(r) || r.Header.Get("HX-Request") != "" || r.PostFormValue(formKeyField) == "" || !sameOrigin(r) || !sendable(r.URL.Path) {
		return nil
	}
	return pendingFrom(r.URL.Path, r.PostForm, "")
}

// carried is the form the sign-in form r carries, or nil.
func carried(r *http.Request) *pendingForm {
	if r.Method != http.MethodPost || !sendable(r.PostFormValue(carryAction)) {
		return nil
	}
	p := pendingFrom(r.PostFormValue(carryAction), r.PostForm, carryPrefix)
	if len(p.Fields) == 0 {
		return nil
	}
	return p
}

// pendingFrom takes the fields of form named prefix+name, but for the CSRF
// token (the next session's goes with it), in a stable order.
func pendingFrom(action string, form url.Values, prefix string) *pendingForm {
	p := &pendingForm{Action: action}
	for _, name := range slices.Sorted(maps.Keys(form)) {
		field, ok := strings.CutPrefix(name, prefix)
		if !ok || field == "" || field == "csrf" || (prefix == "" && (field == carryAction || strings.HasPrefix(field, carryPrefix))) {
			continue
		}
		for _, v := range form[name] {
			p.Fields = append(p.Fields, pendingField{Name: field, Value: v})
		}
	}
	return p
}

// sendable is a console address a form may be sent to again: a page of
// the console, but not the sign-in or sign-out.
func sendable(action string) bool {
	return action != "" && safeNext(action) == action && !strings.ContainsAny(action, "?#") &&
		action != "/console/signin" && action != "/console/signout"
}

// resendData is the page that shows a carried form once signed in again.
type resendData struct {
	CSRF    string
	Pending *pendingForm
	Back    string
}
