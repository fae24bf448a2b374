"""Privacy attacks: client inference (``cia``), DLG (``dlg``), membership inference
(``membership``) and their report shapes (``report``). Import the submodules directly
(``dlg`` imports TensorFlow).
"""
