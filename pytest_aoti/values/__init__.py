"""Generated values: the engine compared with eager on values the example never held."""
