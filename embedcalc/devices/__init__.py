"""The devices time is predicted for (DESIGN.md §7, §10): the shipped catalogue (:mod:`.catalogue`, read from the
``hardware/`` data folder), this machine as ``bench --peak`` measured it (:mod:`.local`), and the time model's
calibration constants (:mod:`.calibration`). Named ``devices`` because ``hardware`` is the data folder's name."""
