"""One ``aoti.check`` call from eager to result: the call resolved into one frozen plan, the checks run phase by phase, and the runner that owns the call around the export and the compile."""
