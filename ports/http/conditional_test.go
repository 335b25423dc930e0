package httpport

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every write under /v1 and /admin reads If-Match the same way before it
// does anything: "*", one strong tag of a version, or a weak tag (which
// never matches: 412); anything else (a list, a tag that is no entity
// tag's spelling, words) is 400 naming the header, never taken for a
// weak tag nor ignored. A write that checks no version (a create, a
// reference record, a test ping, the /admin writes) refuses any tag with 412
// rather than run as if none had been sent.
func TestIfMatchIsReadTheSameOnEveryWrite(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	malformedTags := []string{`junk`, `1`, `"two"`, `"1", "2"`, `W/"1", "2"`, `W/"1", W/"2"`, `W/1`, `W/"1`, `W/"a b"`, `w/"1"`}
	writes := 0
	for _, rt := range (&server{}).routes() {
		method, _ := requestPath(rt.pattern)
		if !rt.api || method == http.MethodGet {
			continue
		}
		writes++
		t.Run(rt.pattern, func(t *testing.T) {
			before := f.tx.Position()
			body := `{}`
			if method == http.MethodDelete { // takes none: a body would be its 400
				body = ""
			}
			send := func(tag string) answer {
				_, path := requestPath(rt.pattern)
				return f.do(method, path, f.keyFor(rt), body, "If-Match", tag)
			}
			for _, tag := range malformedTags {
				a := send(tag)
				require.Equal(t, http.StatusBadRequest, a.Code, "If-Match: %s: %s", tag, a.Body.String())
				require.Equal(t, "/problems/malformed-request", a.body["type"], tag)
				errs, _ := a.body["errors"].([]any)
				require.Len(t, errs, 1, a.Body.String())
				require.Equal(t, "If-Match", errs[0].(map[string]any)["field"], tag)
			}
			a := send(`W/"1"`)
			require.Equal(t, http.StatusPreconditionFailed, a.Code, "a weak tag: %s", a.Body.String())
			require.Equal(t, "/problems/precondition-failed", a.body["type"])
			a = send(`"1"`)
			if rt.etag {
				require.NotEqual(t, http.StatusBadRequest, a.Code, "a strong tag is read: %s", a.Body.String())
			} else {
				require.Equal(t, http.StatusPreconditionFailed, a.Code, "%s checks no version: %s", rt.pattern, a.Body.String())
				require.Equal(t, "/problems/precondition-failed", a.body["type"])
				require.Contains(t, a.body["detail"], rt.pattern)
			}
			require.Equal(t, before, f.tx.Position(), "nothing written")
		})
	}
	require.Greater(t, writes, 40, "every write under /v1 and /admin")
}
