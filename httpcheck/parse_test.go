package httpcheck

import (
	"net/http"
	"strings"
	"testing"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		path, q   string
		h         http.Header
		keyHeader string
		want      Check
		err       string // a substring of the 400's reason; empty: no error
	}{
		{name: "query form", path: Path, q: "policy=api&key=k1",
			want: Check{Policy: "api", Key: "k1", Cost: 1, DenyStatus: 429}},
		{name: "query form with cost and deny_status", path: Path, q: "policy=api&key=k1&cost=3&deny_status=403",
			want: Check{Policy: "api", Key: "k1", Cost: 3, DenyStatus: 403}},
		{name: "cost 0 looks", path: Path, q: "policy=api&key=k&cost=0", want: Check{Policy: "api", Key: "k", Cost: 0, DenyStatus: 429}},
		{name: "query form ignores X-Sluice headers", path: Path, q: "policy=api&key=k1",
			h:    hdr(HeaderPolicy, "free", HeaderKey, "other", HeaderCost, "0", HeaderDenyStatus, "401"),
			want: Check{Policy: "api", Key: "k1", Cost: 1, DenyStatus: 429}},
		{name: "query form, key from the operator's header", path: Path, q: "policy=api", keyHeader: "X-Forwarded-For",
			h: hdr("X-Forwarded-For", "198.51.100.7, 203.0.113.5"), want: Check{Policy: "api", Key: "203.0.113.5", Cost: 1, DenyStatus: 429}},
		{name: "X-Forwarded-For given twice: the last line's last entry", path: Path, q: "policy=api", keyHeader: "x-forwarded-for",
			h: hdr("X-Forwarded-For", "1.1.1.1", "X-Forwarded-For", "2.2.2.2,3.3.3.3"), want: Check{Policy: "api", Key: "3.3.3.3", Cost: 1, DenyStatus: 429}},
		{name: "query key wins over the operator's header", path: Path, q: "policy=api&key=k", keyHeader: "X-User",
			h: hdr("X-User", "u"), want: Check{Policy: "api", Key: "k", Cost: 1, DenyStatus: 429}},
		{name: "header form", path: Path, h: hdr(HeaderPolicy, "api", HeaderKey, "k", HeaderCost, "2", HeaderDenyStatus, "403"),
			want: Check{Policy: "api", Key: "k", Cost: 2, DenyStatus: 403}},
		{name: "header form under the prefix ignores the original query", path: Path + "/orders/7", q: "policy=free&key=x",
			h: hdr(HeaderPolicy, "api", HeaderKey, "k"), want: Check{Policy: "api", Key: "k", Cost: 1, DenyStatus: 429}},
		{name: "header form: the operator's header replaces X-Sluice-Key", path: Path + "/x", keyHeader: "X-User",
			h: hdr(HeaderPolicy, "api", HeaderKey, "spoofed", "X-User", "u1"), want: Check{Policy: "api", Key: "u1", Cost: 1, DenyStatus: 429}},
		{name: "header form: operator's header missing", path: Path + "/x", keyHeader: "X-User",
			h: hdr(HeaderPolicy, "api", HeaderKey, "spoofed"), err: "missing key: give the X-User header (the key header this check was configured with)"},

		{name: "other path", path: "/v1/checks", q: "policy=api&key=k", err: `no check at "/v1/checks"`},
		// What is missing is named in the form the check used: the query
		// form reads no X-Sluice-* header, and is not told to send one.
		{name: "missing policy", path: Path, q: "key=k", err: "missing policy: give policy=NAME in the query (the query form reads no X-Sluice-Policy header)"},
		{name: "missing key", path: Path, q: "policy=api", err: "missing key: give key=KEY in the query (the query form reads no X-Sluice-Key header)"},
		{name: "missing key, the operator's header", path: Path, q: "policy=api", keyHeader: "X-User", err: "missing key: give key=KEY in the query, or the X-User header"},
		{name: "empty header form", path: Path, err: "missing policy: give the X-Sluice-Policy header, or the query form /v1/check?policy=NAME&key=KEY"},
		{name: "header form: key missing", path: Path + "/x", h: hdr(HeaderPolicy, "api"), err: "missing key: give the X-Sluice-Key header, or the query form /v1/check?policy=NAME&key=KEY"},
		{name: "unknown parameter", path: Path, q: "policy=api&key=k&cots=2", err: `unknown parameter "cots"`},
		{name: "parameter twice", path: Path, q: "policy=api&key=k&key=j", err: "parameter key given more than once"},
		{name: "bad cost", path: Path, q: "policy=api&key=k&cost=-1", err: `invalid cost "-1"`},
		{name: "cost not a number", path: Path, q: "policy=api&key=k&cost=1e3", err: `invalid cost "1e3"`},
		{name: "bad deny_status", path: Path, q: "policy=api&key=k&deny_status=500", err: `invalid deny_status "500": must be 401, 403 or 429`},
		{name: "bad escape", path: Path, q: "policy=api&key=%zz", err: "invalid query"},
		// Issue 28: header-form duplicates were first-wins.
		{name: "X-Sluice-Key twice", path: Path, h: hdr(HeaderPolicy, "api", HeaderKey, "k", HeaderKey, "j"), err: "header X-Sluice-Key given more than once"},
		{name: "X-Sluice-Policy twice", path: Path + "/x", h: hdr(HeaderPolicy, "api", HeaderPolicy, "free", HeaderKey, "k"), err: "header X-Sluice-Policy given more than once"},
		{name: "X-Sluice-Cost twice", path: Path, h: hdr(HeaderPolicy, "api", HeaderKey, "k", HeaderCost, "0", HeaderCost, "1"), err: "header X-Sluice-Cost given more than once"},
		{name: "X-Sluice-Deny-Status twice", path: Path, h: hdr(HeaderPolicy, "api", HeaderKey, "k", HeaderDenyStatus, "401", HeaderDenyStatus, "403"), err: "header X-Sluice-Deny-Status given more than once"},
		{name: "X-Sluice-Key twice, ignored for the operator's header", path: Path, keyHeader: "X-User",
			h: hdr(HeaderPolicy, "api", HeaderKey, "a", HeaderKey, "b", "X-User", "u1"), want: Check{Policy: "api", Key: "u1", Cost: 1, DenyStatus: 429}},
		{name: "bad header cost", path: Path, h: hdr(HeaderPolicy, "api", HeaderKey, "k", HeaderCost, "x"), err: `invalid cost "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			if h == nil {
				h = http.Header{}
			}
			got, err := Parse(tc.path, tc.q, h, tc.keyHeader)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if _, ok := err.(*BadRequest); !ok {
					t.Fatalf("error %T, want *BadRequest", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// FuzzParse: whatever the gateway sends, Parse answers a check or a
// one-line *BadRequest, and never a check without a policy or a key or
// with a negative cost.
func FuzzParse(f *testing.F) {
	f.Add(Path, "policy=api&key=k&cost=2&deny_status=403", "", "", "")
	f.Add(Path+"/a/b", "key=x", "api", "k", "X-Forwarded-For")
	f.Add(Path, "policy=%zz", "", "", "")
	f.Add("/", "", "", "", "")
	f.Add(Path, "", "p", "1.1.1.1, 2.2.2.2", "X-Forwarded-For")
	f.Add(Path, "policy=api&key=k&reserve=5&reserve_ttl=1m", "", "", "")
	f.Add(Path, "policy=api&key=k&reserve=5&charge=1", "", "", "")
	f.Fuzz(func(t *testing.T, path, q, policy, key, keyHeader string) {
		h := http.Header{}
		h.Set(HeaderPolicy, policy)
		h.Set(HeaderKey, key)
		if keyHeader != "" {
			h.Set(keyHeader, key)
		}
		// An odd-length key also comes twice: a header form that reads
		// X-Sluice-Key must refuse it.
		twice := len(key)%2 == 1
		if twice {
			h.Add(HeaderKey, key)
		}
		c, err := Parse(path, q, h, keyHeader)
		headerForm := path == Path && q == "" || strings.HasPrefix(path, Path+"/")
		if twice && headerForm && keyHeader == "" && (err == nil || !strings.Contains(err.Error(), "given more than once")) {
			t.Fatalf("X-Sluice-Key twice: %+v, %v", c, err)
		}
		if err != nil {
			if _, ok := err.(*BadRequest); !ok {
				t.Fatalf("error %T", err)
			}
			if strings.Contains(err.Error(), "\n") && !strings.Contains(q+path+policy+key+keyHeader, "\n") {
				t.Fatalf("a reason of more than one line: %q", err)
			}
			return
		}
		if c.Policy == "" || c.Key == "" || c.Cost < 0 || (c.DenyStatus != 401 && c.DenyStatus != 403 && c.DenyStatus != 429) ||
			(c.Reserve && c.Charge) || (c.ReserveTTL != 0 && !c.Reserve) {
			t.Fatalf("accepted %+v", c)
		}
	})
}
