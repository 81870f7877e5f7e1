"""From a trained run to translations outside the model server: the SavedModel export that TF
Serving serves, the CTranslate2 export, file translation and the demo.

These tools read a run directory (`run_directory`) and use the model code; `serving/`, the model
server and the client, imports nothing of this package (tests/test_structure.py).
"""

from common.startup import import_tensorflow_quietly

# First, before any module of the package imports TensorFlow (`inference.export` imports Keras
# before the model).
import_tensorflow_quietly()
