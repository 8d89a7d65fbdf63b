package settings

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a flag of a size in bytes, written as Redis writes them in
// its configuration: 1k is 1000, 1kb is 1024; likewise m, mb, g, gb.
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}, {"b", 1}}

func (b *ByteSize) Set(s string) error {
	v := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("must be a size such as 256mb, 1gb or 500000 (bytes)")
	}
	*b = ByteSize(n * mult)
	return nil
}

func (b *ByteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
