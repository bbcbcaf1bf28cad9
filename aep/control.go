package aep

// IsCommandR reports whether typ is an AEP-0004 command: one of the
// registered control.{verb} commands of §5, or a vendor command
// x.{vendor}.control.{verb}. Acknowledgements (control.accepted,
// control.rejected) and attention.routed are not commands.
func IsCommandR(typ string) bool {
	return typ != "attention.routed" && isForeignEmitterR([]byte(typ))
}
