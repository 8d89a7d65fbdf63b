package policy

import (
	"fmt"
	"testing"
)

func TestInfo(t *testing.T) {
	var none *Live
	if got := fmt.Sprint(none.Info("")); got != "[[policies 0] [policies_file ]]" {
		t.Errorf("without policies: %s", got)
	}
	set, err := Parse("p.yaml", []byte("policies:\n  b:\n    algorithm: gcra\n    limit: 5\n    period: 1s\n  a:\n    algorithm: gcra\n    limit: 5\n    period: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(NewLive(set).Info("p.yaml")), "[[policies 2] [policies_file p.yaml] [policy_names a,b]]"; got != want {
		t.Errorf("Info = %s, want %s", got, want)
	}
}
