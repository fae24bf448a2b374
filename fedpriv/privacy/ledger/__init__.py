"""A party's release ledger underneath :mod:`fedpriv.privacy.releases`: the SQLite store
(:mod:`fedpriv.privacy.ledger.store`), the state folder's checks
(:mod:`fedpriv.privacy.ledger.folder`) and the privacy events each release row holds
(:mod:`fedpriv.privacy.ledger.events`)."""
