package settings

import (
	"flag"
	"fmt"
	"strconv"
)

// Recording is the settings of a recording of decision inputs (package
// record), for `sluice simulate`.
type Recording struct {
	Path    string   // the file; empty: no recording (the flag's "off")
	Sample  int      // one key in Sample is recorded, every decision of it
	MaxRate int      // decisions recorded a second, past which Sample rises; 0: no bound
	MaxSize ByteSize // one file's bound, past which it is rotated
	Keep    int      // rotated files kept
	Keys    string   // hashed or clear
	Salt    string   // the keys' hash salt; empty: a random one per process
}

// registerRecord makes flags of the recording's settings.
func (c *Config) registerRecord(fs *flag.FlagSet) {
	r := &c.Record
	fs.Var((*offAddr)(&r.Path), "record",
		"`file` to record decision inputs to (JSON lines, docs/operating.md), for sluice simulate; off: none")
	fs.IntVar(&r.Sample, "record-sample", r.Sample, "record every decision of one key in `n` (1: every key)")
	fs.IntVar(&r.MaxRate, "record-max-rate", r.MaxRate,
		"most decisions recorded a second (`n`); past it the sample rises to fewer keys, for as long as the process runs; 0: no bound")
	fs.Var(&r.MaxSize, "record-max-size", "most bytes one --record file holds (`size`); past it the file is rotated to FILE.1, FILE.2, ...")
	fs.IntVar(&r.Keep, "record-keep", r.Keep, "rotated --record files kept (`n`); the oldest is removed")
	fs.StringVar(&r.Keys, "record-keys", r.Keys,
		"how keys are recorded (`form`): hashed (HMAC-SHA-256 under --record-key-salt, telling keys apart without holding them) or clear")
	fs.StringVar(&r.Salt, "record-key-salt", r.Salt,
		"`secret` the recorded keys are hashed under, to find a key's lines or join several sidecars' recordings; empty: a random one per process")
}

// validateRecord checks the recording's settings.
func (c *Config) validateRecord() error {
	r := &c.Record
	if r.Sample < 1 {
		return fmt.Errorf("invalid %s %q: must be 1 (every key) or more", c.name("record-sample"), strconv.Itoa(r.Sample))
	}
	if r.MaxRate < 0 {
		return fmt.Errorf("invalid %s %q: must be 0 (no bound) or more", c.name("record-max-rate"), strconv.Itoa(r.MaxRate))
	}
	if r.MaxSize < 4096 {
		return fmt.Errorf("invalid %s %q: must be a size of at least 4kb, such as 64mb", c.name("record-max-size"), r.MaxSize.String())
	}
	if r.Keep < 0 {
		return fmt.Errorf("invalid %s %q: must be 0 or more", c.name("record-keep"), strconv.Itoa(r.Keep))
	}
	if r.Keys != "hashed" && r.Keys != "clear" {
		return fmt.Errorf("invalid %s %q: must be hashed or clear", c.name("record-keys"), r.Keys)
	}
	return nil
}
