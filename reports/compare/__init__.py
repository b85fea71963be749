"""2..N runs side by side: ``comparison.json`` (``runs``), its pages (``md``, ``html``) and each run's reference
against another's (``references``)."""
