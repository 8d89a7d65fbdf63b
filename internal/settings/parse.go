package settings

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// EnvName is the environment variable that sets flag name:
// SLUICE_ and the name in capitals, dashes as underscores.
func EnvName(name string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Parse reads fs's command line. A value a flag refuses is one line that
// names the flag and how to write it (`invalid --upstream-timeout "100":
// durations need a unit: 100ms`), not the flag package's "invalid value
// ... for flag -upstream-timeout: parse error".
func Parse(fs *flag.FlagSet, args []string) error {
	var refused error
	orig := map[string]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		orig[f.Name] = f.Value
		name := "--" + f.Name
		if len(f.Name) == 1 {
			name = "-" + f.Name // as deploy/README.md writes sluice inject -f
		}
		c := checked{Value: f.Value, name: name, refused: &refused}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			f.Value = checkedBool{c}
		} else {
			f.Value = c
		}
	})
	// The usage reads the values' types: give them back.
	defer fs.VisitAll(func(f *flag.Flag) { f.Value = orig[f.Name] })
	if err := fs.Parse(args); err != nil {
		if refused != nil {
			return refused
		}
		return err
	}
	return nil
}

// checked is a flag's value that keeps the explained error of a refused
// value for Parse.
type checked struct {
	flag.Value
	name    string
	refused *error
}

func (c checked) Set(s string) error {
	if err := c.Value.Set(s); err != nil {
		*c.refused = fmt.Errorf("invalid %s %q: %s", c.name, s, explain(c.Value, s, err))
		return *c.refused
	}
	return nil
}

type checkedBool struct{ checked }

func (checkedBool) IsBoolFlag() bool { return true }

// explain is why v refuses s, with the way to write it: the flag package
// says only "parse error" for a number, a duration or a boolean.
func explain(v flag.Value, s string, err error) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return err.Error()
	}
	switch g.Get().(type) {
	case time.Duration:
		if _, e := strconv.ParseFloat(s, 64); e == nil {
			return "durations need a unit: " + s + "ms"
		}
		return "must be a duration such as 100ms, 2s or 1m"
	case int:
		return "must be a whole number"
	case bool:
		return "must be true or false"
	case *slog.Level:
		return "must be debug, info, warn or error"
	}
	// A value's own error may repeat the value ("invalid on_failure
	// \"maybe\": must be ..."): the line names it once already.
	if _, rest, ok := strings.Cut(err.Error(), strconv.Quote(s)+": "); ok {
		return rest
	}
	return err.Error()
}

// ApplyEnv sets each flag of fs not given on the command line from its
// variable (EnvName), if getenv has it: a flag given wins. An empty
// variable is unset.
func ApplyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	_, err := applyEnv(fs, getenv)
	return err
}

func applyEnv(fs *flag.FlagSet, getenv func(string) string) (set map[string]bool, err error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	set = map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		v := getenv(EnvName(f.Name))
		if err != nil || given[f.Name] || v == "" {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("invalid %s %q: %s", EnvName(f.Name), v, explain(f.Value, v, e))
		}
		set[f.Name] = true
	})
	return set, err
}

// Finish completes c, whose flags fs has (Register) and has parsed: each
// flag not given takes its SLUICE_* variable, then c is validated and the
// files it names are looked for. An
// error names the variable when that is where the wrong value came from.
func (c *Config) Finish(fs *flag.FlagSet, getenv func(string) string) error {
	if fs.Lookup("listen") == nil {
		return errors.New("settings: Finish needs the flags of Register")
	}
	env, err := applyEnv(fs, getenv)
	if err != nil {
		return err
	}
	c.env = env
	given := env["admin-listen"]
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "admin-listen" })
	c.AdminOptional = !given
	if err := c.Validate(); err != nil {
		return err
	}
	return c.checkFiles()
}

// from names the variable flag came from, for a message that names the
// value first; "" when it came from the command line.
func (c *Config) from(flag string) string {
	if c.env[flag] {
		return " (from " + EnvName(flag) + ")"
	}
	return ""
}

// name is how an error names flag: the variable it was set by, or the
// flag.
func (c *Config) name(flag string) string {
	if c.env[flag] {
		return EnvName(flag)
	}
	return "--" + flag
}
