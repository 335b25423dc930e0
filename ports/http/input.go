package httpport

import (
	"bytes"
	"cmp"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"hearth/domain/apperr"
	"hearth/domain/text"
	"hearth/domain/uuid"
)

// cleanInput checks the text of a decoded request body and makes its ids
// canonical, once for every request body:
//
//   - the body must be valid UTF-8 (encoding/json would quietly turn an
//     invalid byte into U+FFFD);
//   - every string in dst is text (package text): one line, unless its
//     field is tagged text:"multiline", which allows tab, line feed and
//     carriage return;
//   - a string field named id or *_id that holds a UUID, in any case, is set
//     to the UUID's canonical lower-case form, so ids are stored and
//     compared in one form.
//
// A failure is a 422 validation error naming every offending field.
func cleanInput(body []byte, dst any) error {
	var errs apperr.Fields
	if !utf8.Valid(body) {
		errs.Add(cmp.Or(invalidUTF8Field(body), "body"), "must be valid UTF-8")
		return errs.Err()
	}
	// encoding/json decodes an escaped lone UTF-16 surrogate ("\ud800") as
	// U+FFFD: text that was not sent (ownsReplacement).
	walkStrings(reflect.ValueOf(dst), "", false, func(field string, v reflect.Value, multiline bool) {
		if p := text.Problem(v.String(), multiline); p != "" {
			errs.Add(field, "%s", p)
			return
		}
		if strings.ContainsRune(v.String(), utf8.RuneError) && !ownsReplacement(body) {
			errs.Add(field, "must be valid Unicode text: a \\u escape of a lone UTF-16 surrogate is not")
			return
		}
		if v.CanSet() && isIDField(field) {
			if id, ok := uuid.Parse(v.String()); ok {
				v.SetString(id)
			}
		}
	})
	return errs.Err()
}

// ownsReplacement reports whether body, valid UTF-8, holds a U+FFFD of its
// own (as UTF-8 or escaped). One that does not can give a decoded string
// one only from an escaped lone UTF-16 surrogate, which encoding/json
// decodes as U+FFFD.
func ownsReplacement(body []byte) bool {
	return bytes.Contains(body, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`))
}

// isIDField reports whether the field (its last path segment) names an id:
// id, *_id, or an element of a list *_ids.
func isIDField(field string) bool {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		field = field[i+1:]
	}
	if list, _, ok := strings.Cut(field, "["); ok {
		return strings.HasSuffix(list, "_ids")
	}
	return field == "id" || strings.HasSuffix(field, "_id")
}

// walkStrings calls visit for every string in v, with its path as JSON
// names it (a.b, a[2]) and whether its field is multi-line text.
func walkStrings(v reflect.Value, path string, multiline bool, visit func(path string, v reflect.Value, multiline bool)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			walkStrings(v.Elem(), path, multiline, visit)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case name == "" && f.Anonymous: // embedded: its fields are the outer object's
				walkStrings(v.Field(i), path, multiline, visit)
				continue
			case name == "":
				name = f.Name
			}
			walkStrings(v.Field(i), joinPath(path, name), f.Tag.Get("text") == "multiline", visit)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walkStrings(v.Index(i), path+"["+strconv.Itoa(i)+"]", multiline, visit)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			walkStrings(it.Value(), joinPath(path, it.Key().String()), multiline, visit)
		}
	case reflect.String:
		visit(path, v, multiline)
	}
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// invalidUTF8Field names the field whose value holds the body's first
// invalid UTF-8 ("" when it cannot tell). It reads the body token by token:
// the bytes between the end of one token and the end of the next are that
// next token and the ASCII punctuation before it, so an invalid byte among
// them belongs to that token.
func invalidUTF8Field(body []byte) string {
	type frame struct {
		object  bool
		wantKey bool
		key     string
		index   int
	}
	var stack []*frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		return b.String()
	}
	next := func() { // the current value is done
		if len(stack) == 0 {
			return
		}
		if top := stack[len(stack)-1]; top.object {
			top.wantKey = true
		} else {
			top.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var prev int64
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		end := dec.InputOffset()
		raw := body[prev:end]
		prev = end
		switch tok {
		case json.Delim('{'), json.Delim('['):
			stack = append(stack, &frame{object: tok == json.Delim('{'), wantKey: true})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			next()
			continue
		}
		if len(stack) > 0 {
			if top := stack[len(stack)-1]; top.object && top.wantKey {
				top.key, top.wantKey = tok.(string), false
				if !utf8.Valid(raw) {
					return path()
				}
				continue
			}
		}
		if !utf8.Valid(raw) {
			return path()
		}
		next()
	}
}
